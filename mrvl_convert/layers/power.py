"""Power: out = in ** exponent, for a scalar constant exponent (ONNX ``Pow(x, c)``; a standalone
``Sqrt`` as exponent 0.5, within fp16's rounding of sqrt).

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc):
``exponent`` as ``std::to_string`` prints the float, six decimals.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import Attr, LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, lowering


def _attrs(node: gs.Node) -> Dict[str, Any]:
    if node.op == "Sqrt":  # mrvl.sqrt: the layer set has no Sqrt layer; 0.5 is exact in "%f"
        return {"exponent": 0.5}
    return {"exponent": float(np.float32(const_value(node.inputs[1]).reshape(-1)[0]))}


class PowerKernel(UnaryKernel):
    """x ** exponent in float32 (a negative base with a fractional exponent gives NaN, as
    onnxruntime's Pow does)."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.exponent = np.float32(spec.value("exponent"))

    def compute(self, x: np.ndarray) -> np.ndarray:
        # 0 ** -1 is inf (a Div by zero, _div_pairs.py): the range check reports it, not numpy
        with np.errstate(divide="ignore"):
            return np.power(x, self.exponent)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Pow by the kernel's float32 exponent (onnxruntime and numpy both square
        exactly for 2, the LayerNorm's exponent)."""
        return [builder.op("Pow", [inputs[0], builder.float_constant(self.exponent)])]

    def passes_nonfinite(self, index: int) -> bool:
        """With a positive exponent inf ** e is inf and NaN ** e NaN (with e <= 0, inf ** e is
        0 or 1)."""
        return bool(self.exponent > 0)


KIND = LayerKind(
    name="Power",
    summary="out = in ** exponent (a scalar)",
    kernel=PowerKernel,
    lower=lowering("Power", "pow", _attrs),
    required_roles=roles("pow"),
    attrs=(Attr("exponent", "decimal", "the scalar exponent, six decimals"),),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    source=SOURCE,
)
