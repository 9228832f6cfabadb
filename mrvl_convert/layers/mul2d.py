"""Mul2D: elementwise product of two activations, or of one activation and a constant, with an
optional fused activation. The second operand may broadcast into the first (a squeeze-excite gate
``[N, C, 1, 1]`` times ``[N, C, H, W]``). Also what a Div by a constant becomes (times the
reciprocal), the last layer of a HardSwish (``_decompose.py``) and of a GELU (``gelu.py``), and
``Div(d, Sqrt(v))`` as Rsqrt then Mul2D (``layer_norm.py``), and a Div of two activations as
Power(b, -1) then Mul2D (``_div_pairs.py``).

The contract is the newer codegen's ``mrvl.mul``: ``CreateCompositeMrvlMulLayer`` (princekumar70/
tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc), R4
(``resizeInputOutputLayoutTo4dim``: one ``data_layout_shape_<i>`` per activation, a constant as
``input_const_name`` + ``input_const_shape``), ``activation_type`` by ``setActivationFunction``;
its mrvl.py takes rank 2 to 4 and batch 1.

Div by a constant c: the layer multiplies by fp16(1/c), whose relative error is at most 2**-11,
then rounds the product to fp16: at most about 2**-10 relative from x / c in float32.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.fp16 import fp16_const
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.ufuncs import activate_inplace
from mrvl_convert.layers._decompose import lower_hardswish, physical_const
from mrvl_convert.layers._div_pairs import lower_div_pair
from mrvl_convert.layers._kind import FUSED_ACTIVATION, Const, LayerKind, roles
from mrvl_convert.layers._lowering import activation, new_layer
from mrvl_convert.layers._unary import ONLY_MARVELL
from mrvl_convert.layers.gelu import lower_gelu
from mrvl_convert.layers.l2_normalize import lower_l2_normalize
from mrvl_convert.layers.layer_norm import lower_sqrt_div

SOURCE = ("princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
          "src/relay/backend/contrib/mrvl/codegen.cc CreateCompositeMrvlMulLayer")


def operands(node: gs.Node, ctx: LayoutContext, rank: int
             ) -> Tuple[List[int], List[TensorLayout], List[Tuple[str, np.ndarray]]]:
    """Activation inputs (the one of the output's shape first) and constant operands, in the
    order the first activation has (``LayoutContext.keep_order``)."""
    out_shape = static_shape(node.outputs[0])
    acts = [t for t in node.inputs if not is_const(t)]
    acts.sort(key=lambda t: static_shape(t) != out_shape)  # stable: the full one first
    perm = ctx.keep_order(acts[0], native(rank))
    indices, layouts = [], []
    for tensor in acts:
        index, layout = ctx.require(tensor, perm)
        indices.append(index)
        layouts.append(layout)
    consts = [("operand", physical_const(const_value(t), rank, perm)) for t in node.inputs
              if is_const(t)]
    return indices, layouts, consts


def lower(composite: Composite, ctx: LayoutContext) -> None:
    if composite.binding.node("hardswish") is not None:
        lower_hardswish(composite, ctx)
        return
    if composite.binding.node("gelu") is not None or composite.binding.node("gate") is not None:
        lower_gelu(composite, ctx)
        return
    if composite.binding.node("normalized") is not None:
        lower_l2_normalize(composite, ctx)
        return
    if composite.binding.node("quotient") is not None:
        lower_sqrt_div(composite, ctx)
        return
    if composite.binding.node("divide") is not None:
        lower_div_pair(composite, ctx)
        return
    div = composite.binding.node("div")
    node = div if div is not None else composite.binding.node("mul")
    rank = len(static_shape(node.outputs[0]))
    if div is not None:
        perm = ctx.keep_order(div.inputs[0], native(rank))
        index, layout = ctx.require(div.inputs[0], perm)
        reciprocal = (1.0 / const_value(div.inputs[1]).astype(np.float64)).astype(np.float32)
        indices, layouts = [index], [layout]
        consts = [("operand", physical_const(reciprocal, rank, perm))]
    else:
        indices, layouts, consts = operands(node, ctx, rank)
    out = TensorLayout(tuple(static_shape(composite.output)), layouts[0].perm, layouts[0].labels)
    ctx.emit(new_layer(composite, "Mul2D", indices, layouts, out,
                       {"activation_type": activation(composite)}, consts), composite.output)


def broadcast_operand(spec: LayerSpec, consts: Mapping[str, np.ndarray]
                      ) -> Optional[np.ndarray]:
    """Check the operands of a Mul2D/Sub-like layer: the first input has the output's shape and
    the second operand (an input or ``input_const_name``) broadcasts into it. Returns the
    constant operand, fp16-rounded, or None when there are two inputs."""
    shapes = spec.input_shapes
    if len(shapes) == 1:
        other = spec.const("input_const_name", consts)
        const: Optional[np.ndarray] = other
        other_shape = other.shape
    elif len(shapes) == 2:
        if "input_const_name" in spec.attrs:
            raise spec.error("attrs.input_const_name", "given with two activation inputs")
        const, other_shape = None, shapes[1]
    else:
        raise spec.error("inputs", f"expected 1 input (+ constant) or 2, got {len(shapes)}")
    try:
        out = np.broadcast_shapes(shapes[0], other_shape)
    except ValueError:
        out = None
    if out != tuple(shapes[0]):
        raise spec.error("inputs", f"the second operand {list(other_shape)} does not broadcast "
                                   f"into the first input {list(shapes[0])}")
    spec.expect_shape(shapes[0])
    return None if const is None else fp16_const(spec, "input_const_name", const)


#: Constant operands within this bound keep a finite float16 input's product finite.
MUL_BOUND = 1.0


class Mul2DKernel(Kernel):
    """a * b (b broadcast into a), or a * constant; optional fused activation."""

    num_inputs = None

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.const = broadcast_operand(spec, consts)
        self.activation = spec.value("activation_type")

    def passes_nonfinite(self, index: int) -> bool:
        """With no fused activation (which can map -inf to a finite value): inf or NaN times
        anything (0 too) is inf or NaN, and broadcasting reads every value."""
        return self.activation is None

    def finite_on_finite(self) -> bool:
        """A product with a constant of magnitude at most ``MUL_BOUND`` (a GELU's constants
        after the square, attention's scale) is never larger than its input."""
        return self.const is not None and bool(np.all(np.abs(self.const) <= MUL_BOUND))

    def run(self, a: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
        return activate_inplace(a * (self.const if b is None else b), self.activation)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Mul (the constant fp16-rounded, broadcast as numpy does), then the activation."""
        other = builder.float_constant(self.const) if len(inputs) == 1 else inputs[1]
        return [builder.activation(builder.op("Mul", [inputs[0], other]), self.activation)]


KIND = LayerKind(
    name="Mul2D",
    summary="elementwise product of an activation and a second activation or `input_const_name`"
            " constant (already in physical order) that numpy-broadcasts into the first",
    kernel=Mul2DKernel,
    lower=lower,
    one_of_roles=roles("mul", "div", "hardswish", "gelu", "gate", "quotient", "normalized",
                       "divide"),
    # a GELU's Erf form (gelu.py) and Div(d, Sqrt(v)) (layer_norm.py) name their other steps
    optional_roles=roles("act", "scale", "erf", "one", "half", "sqrt", "cube", "cubic", "inner",
                         "arg", "tanh", "l2", "clamp", "expand"),
    attrs=(FUSED_ACTIVATION,),
    consts=(Const("operand", "input", "the constant operand, if any", required=False),),
    quantizable=True,
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    source=SOURCE,
)
