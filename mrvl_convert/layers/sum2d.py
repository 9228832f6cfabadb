"""Sum2D: elementwise add of two activations, or of one activation and a constant, with an
optional fused activation. In the newer set the second activation may broadcast into the first
(an additive attention mask ``[B, 1, 1, T]`` into the scores ``[B, heads, T, T]``): its codegen
writes one ``data_layout_shape_<i>`` per input (``resizeInputOutputLayoutTo4dim``) and its
mrvl.py puts no shape condition on ``add``.

The contract is upstream TVM v0.19's ``mrvl.sum2d`` (``src/relay/backend/contrib/mrvl/
codegen.cc``); a constant operand is written as ``input_const_name``. The layer computes in the
order its first operand has (``LayoutContext.keep_order``): NHWC for an image, the logical order
for a token tensor. Also the last layer of a LayerNormalization (``layer_norm.py``).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel, const_broadcast_shape
from mrvl_convert.kernels.fp16 import fp16_const
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.ufuncs import activate_inplace
from mrvl_convert.layers._kind import FUSED_ACTIVATION, MARVELL, Const, LayerKind, roles
from mrvl_convert.layers._lowering import activation, new_layer
from mrvl_convert.layers._elu import lower_elu
from mrvl_convert.layers.layer_norm import lower_layer_norm


def lower(composite: Composite, ctx: LayoutContext) -> None:
    if composite.binding.node("layer_norm") is not None:
        lower_layer_norm(composite, ctx)
        return
    if composite.binding.node("elu") is not None:
        lower_elu(composite, ctx)
        return
    add = composite.binding.node("add")
    out_shape = static_shape(add.outputs[0])
    rank = len(out_shape)
    # The operand of the output's shape first: a second activation may broadcast into it (an
    # additive attention mask [B, 1, 1, T] into the scores [B, heads, T, T]); a + b = b + a.
    acts = sorted((t for t in add.inputs if not is_const(t)),
                  key=lambda t: static_shape(t) != out_shape)
    perm = ctx.keep_order(acts[0], native(rank))
    indices, layouts, consts = [], [], []
    for tensor in add.inputs:
        if is_const(tensor):
            value = const_value(tensor).astype(np.float32)
            value = value.reshape([1] * (rank - value.ndim) + list(value.shape)).transpose(perm)
            consts.append(("operand", np.ascontiguousarray(value)))
    for tensor in acts:
        index, layout = ctx.require(tensor, perm)
        indices.append(index)
        layouts.append(layout)
    out = TensorLayout(tuple(static_shape(composite.output)), perm, layouts[0].labels)
    ctx.emit(new_layer(composite, "Sum2D", indices, layouts, out,
                       {"activation_type": activation(composite)}, consts), composite.output)


def _broadcast(a, b) -> Optional[tuple]:
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        return None


#: Constant operands within this bound keep a finite float16 input's sum finite.
ADD_BOUND = 8.0


class Sum2DKernel(Kernel):
    """Elementwise add of two activations (the second of the first's physical shape or
    broadcasting into it), or of one activation and a constant (``input_const_name``, already in
    physical order, broadcastable); optional activation."""

    num_inputs = None

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        shapes = spec.input_shapes
        self.const = None
        if len(shapes) == 1:
            const = spec.const("input_const_name", consts)
            out = const_broadcast_shape(spec, const)
            self.const = fp16_const(spec, "input_const_name", const)
        elif len(shapes) == 2:
            if _broadcast(shapes[0], shapes[1]) != tuple(shapes[0]):
                raise spec.error("inputs", f"Sum2D's second input {list(shapes[1])} does not "
                                           f"broadcast into the first {list(shapes[0])}")
            if "input_const_name" in spec.attrs:
                raise spec.error("attrs.input_const_name", "given with two activation inputs")
            out = shapes[0]
        else:
            raise spec.error("inputs", f"expected 1 input (+ constant) or 2, got {len(shapes)}")
        spec.expect_shape(out)
        self.activation = spec.value("activation_type")

    def passes_nonfinite(self, index: int) -> bool:
        """With no fused activation (which can map -inf to a finite value): inf or NaN plus anything
        is inf or NaN, and broadcasting reads every value."""
        return self.activation is None

    def finite_on_finite(self) -> bool:
        """An add of a constant of magnitude at most ``ADD_BOUND`` (a LayerNorm's epsilon, a
        hard-swish's 3): a float16 value is at most 65504, the sum then at most 65512, below
        65520 where rounding to float16 overflows. (A fused activation makes no inf.)"""
        return self.const is not None and bool(np.all(np.abs(self.const) <= ADD_BOUND))

    def run(self, a: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
        return activate_inplace(a + (self.const if b is None else b), self.activation)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Add (the constant fp16-rounded, broadcast as numpy does), then the activation."""
        other = builder.float_constant(self.const) if len(inputs) == 1 else inputs[1]
        return [builder.activation(builder.op("Add", [inputs[0], other]), self.activation)]


KIND = LayerKind(
    name="Sum2D",
    summary="elementwise add of two activation inputs (the second of the first's physical shape "
            "or numpy-broadcasting into it), or of one activation and `input_const_name` (a "
            "constant already in physical order, numpy-broadcastable to the output)",
    kernel=Sum2DKernel,
    lower=lower,
    # lut: the int8 carrier of a LUT (qnn/unary.py); elu: _elu.py
    one_of_roles=roles("add", "lut", "layer_norm", "elu"),
    optional_roles=roles("act", "pool"),  # pool: a MaxPool after the LUT (qnn/unary.py)
    attrs=(FUSED_ACTIVATION,),
    consts=(Const("operand", "input", "the constant operand, if any", required=False),),
    quantizable=True,
    r4=frozenset({MARVELL}),   # the newer codegen's CreateCompositeMrvlSumLayer: R4
    source="apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc",
)
