"""Div(a, b) of two activations as Power(b, -1) then Mul2D(a, r) (rule ``mrvl.div_pair``).

The newer layer set (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc) has no division layer; a division by a constant is
already a product by its reciprocal (``mrvl.div_const``), and ``Div(d, Sqrt(v))`` an Rsqrt then a
product (``mrvl.sqrt_div``). A division by any other activation (a masked mean pooling's
``ReduceSum(x * mask) / Clip(ReduceSum(mask), min)``) is the same two steps with the
reciprocal as a layer: ``r = Power(b, -1)`` (the divisor's shape), ``q = Mul2D(a, r)`` with ``r``
broadcasting into ``a`` (the dividend has the output's shape, the divisor its rank).

Bound (u = 2**-11, the inputs already fp16): ``r`` is within u of ``1 / b`` relative, and the
product rounds once more: ``|q - a / b| <= (2u + u**2) |a / b|``, about 2**-10 relative, where
the model's Div rounds once (u), while every value stays normal in fp16 (a quotient below
2**-14 is on a grid of 2**-24: add 2**-25 absolute). The simulator computes each layer in
float32 before rounding, a further 2**-24 each: its quotient is within 2**-10 + 2**-20
relative of onnxruntime's. Zeros and range as the model has them: ``b = 0`` gives ``r = inf``
and ``a * r`` is +-inf by a's sign (NaN for ``a = 0``), as ``a / b`` is; a ``|b| < 1/65504`` has
a reciprocal fp16 cannot hold, so ``r`` and the quotient are inf there even where ``a / b``
would be finite. Either inf is an fp16 range event (Fp16RangeError; a warning under
``on_range_error="warn"``). The simulator holds every zero as +0 (``kernels/fp16.py``), so a
``-0`` divisor gives the inf of a's sign, not its opposite as onnxruntime does.

A lowering, not a graph rewrite: a Div left on CPU computes what the model does. The Power layer
names no source node, so the per-layer comparison compares only the quotient.
"""
from __future__ import annotations

from mrvl_convert.core.graph import static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._lowering import activation, new_layer


def lower_div_pair(composite: Composite, ctx: LayoutContext) -> None:
    """Power(b, -1), then Mul2D(a, r) with the composite's fused activation."""
    div = composite.binding.node("divide")
    rank = len(static_shape(div.outputs[0]))
    perm = ctx.keep_order(div.inputs[0], native(rank))
    ai, full = ctx.require(div.inputs[0], perm)
    bi, narrow = ctx.require(div.inputs[1], perm)
    power = new_layer(composite, "Power", [bi], [narrow],
                      TensorLayout(narrow.shape, narrow.perm, narrow.labels), {"exponent": -1.0})
    power.source_nodes = []   # a partial result: the per-layer comparison skips it
    r = ctx.emit(power, None)
    out = TensorLayout(tuple(static_shape(composite.output)), full.perm, full.labels)
    ctx.emit(new_layer(composite, "Mul2D", [ai, r], [full, narrow], out,
                       {"activation_type": activation(composite)}), composite.output)
