"""LeakyRelu: out = in for in >= 0, alpha * in otherwise.

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc): ``alpha``
as ``std::to_string`` prints it, six decimals (the rule keeps on CPU an alpha that six decimals
would change beyond fp16's precision).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import Attr, LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, lowering

#: ONNX LeakyRelu's default slope.
DEFAULT_ALPHA = 0.01


def _attrs(node: gs.Node) -> Dict[str, Any]:
    return {"alpha": float(np.float32(attr(node, "alpha", DEFAULT_ALPHA)))}


class LeakyReluKernel(UnaryKernel):
    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.alpha = np.float32(spec.value("alpha"))

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.where(x >= 0, x, x * self.alpha).astype(np.float32, copy=False)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("LeakyRelu", [inputs[0]], alpha=float(self.alpha))]


KIND = LayerKind(
    name="LeakyRelu",
    summary="out = in if in >= 0 else alpha * in",
    kernel=LeakyReluKernel,
    lower=lowering("LeakyRelu", "leaky_relu", _attrs),
    required_roles=roles("leaky_relu"),
    attrs=(Attr("alpha", "decimal", "the slope for negative inputs, six decimals"),),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    source=SOURCE,
)
