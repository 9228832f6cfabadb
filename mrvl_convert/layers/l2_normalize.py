"""The L2-normalize idiom ``x / max(||x||, eps)`` (PyTorch's ``F.normalize`` as exporters write
it: ReduceL2 over the last axis keeping it, Clip(eps) or Max(eps), an optional Expand to x's
shape, Div) of an embedding ``x`` ``[1, C]``, as layers of the newer set, which has no division
by an activation and no ReduceL2 (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc):

    sq = Mul2D(x, x); m = FC(sq; W = w, b = DELTA) (w = fp16(1 / C): a mean, so that m
    overflows only where RMS(x) > 256); r = Rsqrt(m); g = Mul2D(r, fp16(sqrt(w))); out =
    Mul2D(x, g), g broadcasting.

Exact in real arithmetic except for DELTA: out = x / sqrt(||x||^2 + DELTA / w), which is x /
max(||x||, eps) where ||x||^2 >> DELTA / w and replaces the clamp: ``eps`` (1e-12 for
F.normalize) is below fp16's range (eps^2 w underflows to 0), so a clamp written as a Clip
bound would be 0 and an all-zero x would give 0 * inf = NaN; with DELTA = 2**-24 (fp16's
smallest subnormal, exact in the Constants-JSON) it gives 0, as the original does. The rule
takes only ``eps^2 w <= DELTA``: a larger eps would clamp where this does not.

Bound in fp16 (u = 2**-11, x already fp16): each output element within (5 u + DELTA / (2 m))
|exact| (1 + u) of the exact quotient, m = w ||x||^2: one rounding in each square (their mean
then within u, halved by the square root), the FC's one output rounding (halved), w's and
sqrt(w)'s roundings (u / 2 each after the root), the Rsqrt's, and the two products'. Where m
>= 2**-12 (RMS(x) >= 2**-6) DELTA vanishes in m's rounding. A square above 65504 (some |x_i| >
255.9) overflows, and the simulator's range check names that layer.

In an int8 (QDQ) model the norm and the Div read two DequantizeLinear copies of one quantized x
(``core.graph.same_value``): the squares read the norm's copy, the last product the Div's;
exact, the copies compute equal floats.

A lowering, not a canonical rewrite: CPU parts keep ReduceL2 and Div. The layers before the last
name no source node, so the per-layer comparison compares only the output.
"""
from __future__ import annotations

import numpy as np

from mrvl_convert.core.graph import static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, default_labels, identity
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._lowering import new_layer

#: Added to the mean of squares: fp16's smallest subnormal (see the module).
DELTA = 2.0 ** -24


def mean_weight(channels: int) -> float:
    """w: the FC's weight, 1 / C as fp16 holds it (the lowering's factor matches it)."""
    return float(np.float16(1.0 / channels))


def lower_l2_normalize(composite: Composite, ctx: LayoutContext) -> None:
    """Mul2D, FC, Rsqrt, Mul2D, Mul2D on the Div's dividend; see the module."""
    x = composite.binding.node("normalized").inputs[0]
    shape = tuple(static_shape(x))
    channels = shape[-1]
    w = mean_weight(channels)
    xi, xl = ctx.require(x, identity(2))
    one = TensorLayout((shape[0], 1), identity(2), default_labels(2))

    def partial(kind, inputs, layouts, out, consts=()):
        layer = new_layer(composite, kind, inputs, layouts, out, {"activation_type": None},
                          list(consts))
        layer.source_nodes = []   # partial results: the per-layer comparison skips them
        return ctx.emit(layer, None)

    # In an int8 model the norm reads its own DequantizeLinear copy of x (frontend/qdq.py),
    # equal to the Div's (rules/checks_l2.py): the squares read it, so no copy is left unread.
    ni, nl = ctx.require(composite.binding.node("l2").inputs[0], identity(2))
    sq = partial("Mul2D", [ni, ni], [nl, nl], nl)
    m = partial("FC", [sq], [xl], one,
                [("kernel", np.full((1, channels), w, np.float32)),
                 ("bias", np.full((1, 1), DELTA, np.float32))])
    r = ctx.emit(_rsqrt(composite, m, one), None)
    g = partial("Mul2D", [r], [one], one,
                [("operand", np.full((1, 1), np.float16(np.sqrt(w)), np.float32))])
    out = TensorLayout(shape, xl.perm, xl.labels)
    ctx.emit(new_layer(composite, "Mul2D", [xi, g], [xl, one], out, {"activation_type": None}),
             composite.output)


def _rsqrt(composite: Composite, index: int, layout: TensorLayout):
    layer = new_layer(composite, "Rsqrt", [index], [layout], layout, {})
    layer.source_nodes = []
    return layer
