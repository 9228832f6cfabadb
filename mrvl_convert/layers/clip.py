"""Clip: out = min(max(in, a_min), a_max). Relu6 is Clip 0..6 (canonicalize turns Min(Relu(x), 6)
into Clip(x, 0, 6)); a lone Min or Max against one constant value is a Clip with one bound (an
exporter's Relu6 whose Relu an int8 model quantized apart); a HardSigmoid lowers to Mul2D, Sum2D and this layer (``_decompose.py``).

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc): ``a_min``
and ``a_max`` as ``std::to_string`` prints them, six decimals. A bound the model leaves out is
float32's lowest or largest value, as TVM's ONNX front end fills it in.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, present
from mrvl_convert.ir.layout import LayoutContext
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._decompose import lower_hardsigmoid
from mrvl_convert.layers._kind import Attr, LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, emit_unary

_F32_MAX = float(np.finfo(np.float32).max)


def _bound(node: gs.Node, name: str, index: int) -> Optional[float]:
    if name in node.attrs:  # opset < 11
        return float(node.attrs[name])
    tensor = present(node, index)
    return None if tensor is None else float(const_value(tensor).reshape(-1)[0])


def clip_bounds(node: gs.Node) -> Dict[str, Any]:
    """``a_min`` and ``a_max`` of an ONNX Clip, or of a Min or Max of an activation and one
    constant value (``min(x, c)`` is Clip with a_max c; constant bounds: the rules check them)."""
    if node.op in ("Min", "Max"):
        bound = float(const_value(node.inputs[1]).reshape(-1)[0])
        low, high = (None, bound) if node.op == "Min" else (bound, None)
    else:
        low, high = _bound(node, "min", 1), _bound(node, "max", 2)
    return {"a_min": -_F32_MAX if low is None else low, "a_max": _F32_MAX if high is None else high}


def lower(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("clip")
    if node is None:
        lower_hardsigmoid(composite, ctx)
        return
    emit_unary(composite, ctx, "Clip", node.inputs[0], clip_bounds(node), composite.output)


class ClipKernel(UnaryKernel):
    """min(max(x, a_min), a_max) in float32 (the bounds are rounded with the output)."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.low = np.float32(spec.value("a_min"))
        self.high = np.float32(spec.value("a_max"))
        if self.low > self.high:
            raise spec.error("attrs.a_min", f"a_min {self.low} is above a_max {self.high}")
        # With both bounds on the float16 grid the output is an input value or a bound: already
        # rounded, so the simulator need not round it (as for Relu).
        with np.errstate(over="ignore"):   # float32's largest value is an unset bound
            self.exact = bool(np.float16(self.low) == self.low
                              and np.float16(self.high) == self.high)

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.minimum(np.maximum(x, self.low), self.high)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Clip: max then min, as ``compute``; one node, which onnxruntime can fuse."""
        low = builder.float_constant(self.low)
        high = builder.float_constant(self.high)
        return [builder.op("Clip", [inputs[0], low, high])]


KIND = LayerKind(
    name="Clip",
    summary="out = min(max(in, a_min), a_max)",
    kernel=ClipKernel,
    lower=lower,
    one_of_roles=roles("clip", "hardsigmoid"),
    attrs=(Attr("a_min", "decimal", "the lower bound, six decimals"),
           Attr("a_max", "decimal", "the upper bound, six decimals")),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    source=SOURCE,
)
