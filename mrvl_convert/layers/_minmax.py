"""Max or Min of two activations as layers of the newer set, which has no maximum or minimum
layer (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc): with ``f`` the operand of the output's shape and
``o`` the other (equal, or broadcasting into it),

- ``Max(f, o) = o + Relu(f - o)``: Sub(f, o) with Relu fused, then Sum2D(that, o);
- ``Min(f, o) = f - Relu(f - o)``: Sub(f, o) with Relu fused, then Sub(f, that).

Exact in real arithmetic. Bound in fp16 (unit roundoff u = 2**-11, inputs already fp16): where
the chosen operand is the one the last layer passes (Max: f <= o; Min: f <= o) the Relu gives
+0 and the result is that operand exactly; otherwise two roundings, |out - exact| <=
u |f - o| + u |exact| (1 + u) + 2**-24 (below 2**-14 fp16's spacing is 2**-24: each rounding
may be off by 2**-25 absolutely). ``f - o`` overflows fp16 (inf) where |f - o| > 65504 though
both operands are in range; the range check of the simulator names such a layer. A NaN operand
gives NaN (onnxruntime's Max propagates it too).

Operands of one shape take the exact form instead (``_max_pairs.py``, rule ``mrvl.max_pair``):
this one is left for an operand that broadcasts.

This is a lowering, not a canonical rewrite: CPU parts keep ONNX's Max and Min. The first layer
names no source node, so the per-layer comparison compares only the last one.
"""
from __future__ import annotations

from mrvl_convert.core.graph import static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._kind import Activation
from mrvl_convert.layers._lowering import new_layer


def lower_max_min(composite: Composite, ctx: LayoutContext) -> None:
    """Sub(f, o) + Relu, then Sum2D(., o) (Max) or Sub(f, .) (Min); see the module."""
    node = composite.binding.node("minmax")
    out_shape = static_shape(node.outputs[0])
    full = 0 if static_shape(node.inputs[0]) == out_shape else 1
    f, o = node.inputs[full], node.inputs[1 - full]
    perm = ctx.keep_order(f, native(len(out_shape)))
    (fi, fl), (oi, ol) = ctx.require(f, perm), ctx.require(o, perm)
    out = TensorLayout(tuple(out_shape), fl.perm, fl.labels)
    diff = new_layer(composite, "Sub", [fi, oi], [fl, ol], out,
                     {"activation_type": Activation.RELU})
    diff.source_nodes = []   # a partial result: the per-layer comparison skips it
    r = ctx.emit(diff, None)
    if node.op == "Max":
        last = new_layer(composite, "Sum2D", [r, oi], [out, ol], out, {"activation_type": None})
    else:
        last = new_layer(composite, "Sub", [fi, r], [fl, out], out, {"activation_type": None})
    ctx.emit(last, composite.output)
