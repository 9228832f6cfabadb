"""int8 one-input functions that no int8 layer before them can fuse: a clamp in the integer
domain, or a LUT carried by an identity Sum2D.

- ``DequantizeLinear -> Relu / Clip / Min / Max (against constants) -> QuantizeLinear``: quantize
  is monotone, so quantize(clip(x, lo, hi)) = clip(quantize(x), quantize(lo), quantize(hi)):
  a ``requant`` to the output scale (where it differs from the input's) and the newer codegen's
  ``Clip`` layer on the int8 values, ``a_min`` / ``a_max`` the quantized bounds (integers; the
  codegen writes a clip on int8 data after Relay's FakeQuantizationToInteger the same way, its
  ``CreateCompositeMrvlActivationLayer`` princekumar70/tvm
  @9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc). Exact.
- ``DequantizeLinear -> f -> QuantizeLinear`` for any other unary ``f`` a LUT holds
  (``lut.py``): the codegen fuses a LUT only after a Conv2D, FC, Sum2D or Mul2D, so it rides on
  a Sum2D adding an int8 zero at the input's scale (``qnn.add`` then ``take``: q * s + 0 quantized
  with s is q again, |q| <= 128 being far from any rounding boundary), whose table is ``f``'s.
  Exact by construction.
- ``DequantizeLinear -> f -> MaxPool -> QuantizeLinear`` (Paddle's hard-swish ending in a Div
  by 6 right before a MaxPool, which onnxruntime's quantizer leaves unquantized between the two):
  the LUT of ``f`` at the QuantizeLinear's scale, then the int8 Maxpool2D. Exact where the table
  is nondecreasing in the int8 value (the rule checks it): quantize is monotone, so
  Q(max f(x_i)) = max Q(f(x_i)) = max LUT(q_i), and a nondecreasing LUT commutes with max.
"""
from __future__ import annotations

import numpy as np

from mrvl_convert.core.graph import scale_of, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._kind import Activation
from mrvl_convert.layers._lowering import new_layer
from mrvl_convert.layers.qnn import lut
from mrvl_convert.layers.pool import MAXPOOL
from mrvl_convert.layers.qnn.requant import emit_requant


def lower_clamp(composite: Composite, ctx: LayoutContext) -> None:
    in_dq, out_q = composite.binding.node("in_dq"), composite.binding.node("out_q")
    clamp = composite.binding.node("clip")
    source = in_dq.inputs[0]
    index, layout = ctx.require(source, native(len(static_shape(source))))
    if scale_of(in_dq) != scale_of(out_q):
        index = emit_requant(composite, ctx, index, layout, (scale_of(in_dq), scale_of(out_q)),
                             None)
    low, high = lut.quantized_bounds(clamp, out_q)
    out = TensorLayout(tuple(static_shape(composite.output)), layout.perm, layout.labels)
    layer = new_layer(composite, "Clip", [index], [layout], out, {"a_min": low, "a_max": high})
    ctx.emit(layer, composite.output)


def lower_lut(composite: Composite, ctx: LayoutContext) -> None:
    in_dq, out_q = composite.binding.node("in_dq"), composite.binding.node("out_q")
    op = composite.binding.node("lut")
    source = in_dq.inputs[0]
    rank = len(static_shape(source))
    index, layout = ctx.require(source, native(rank))
    scale = scale_of(in_dq)
    attrs = {"activation_type": Activation.LUT, "lhs_input_scale": scale,
             "rhs_input_scale": scale, "output_scale": scale}
    consts = [("operand", np.zeros([1] * rank, np.int8)),
              ("lut", lut.table(in_dq, op, out_q))]
    pool = composite.binding.node("pool")
    output = composite.output if pool is None else op.outputs[0]
    out = TensorLayout(tuple(static_shape(output)), layout.perm, layout.labels)
    ctx.emit(new_layer(composite, "Sum2D", [index], [layout], out, attrs, consts), output)
    if pool is not None:
        MAXPOOL.lower(composite, ctx)
