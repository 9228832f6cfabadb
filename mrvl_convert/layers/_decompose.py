"""Lowerings that turn one ONNX node into a chain of layers of the newer set: the codegen has no
HardSigmoid or HardSwish layer (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc), so

- ``HardSigmoid(x) = max(0, min(1, alpha * x + beta))`` becomes Mul2D(x, alpha) -> Sum2D(+beta)
  -> Clip(0, 1);
- ``HardSwish(x) = x * HardSigmoid(x, 1/6, 1/2)`` becomes that chain, then Mul2D(x, gate);
- ``PRelu(x, slope) = Relu(x) - slope * Relu(-x)`` (the codegen has no PRelu layer, and its
  LeakyRelu takes one alpha) becomes Relu(x), Mul2D(x, -1) with Relu fused, Mul2D(slope) and
  Sub. Bound: for x >= 0 every step is exact (x - 0); for x < 0 the result is
  fp16(fp16(slope) * x): at most about 2**-10 relative from slope * x (two roundings, after
  the input's own). Four elementwise layers keep the region whole, where PRelu on CPU would
  cut it twice.

This is a lowering, not a canonical rewrite: the chain rounds differently from onnxruntime's
HardSigmoid, so it only happens on the accelerator, whose fp16 arithmetic rounds anyway (alpha
and beta become fp16 constants: relative error at most 2**-11 each, then one fp16 rounding per
layer). The layers before the last name no source node, so the per-layer comparison
(``compare(..., layers=True)``) compares only the last one, against the node's output.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._kind import Activation
from mrvl_convert.layers._lowering import new_layer

# ONNX HardSwish is HardSigmoid with these.
HARDSWISH_ALPHA, HARDSWISH_BETA = 1.0 / 6.0, 0.5


def _scalar(rank: int, value: float) -> np.ndarray:
    """A constant operand of one value, of the activation's rank (it broadcasts)."""
    return np.full([1] * rank, value, dtype=np.float32)


def physical_const(value: np.ndarray, rank: int,
                   perm: Optional[Sequence[int]] = None) -> np.ndarray:
    """A constant operand padded to the output's rank and put in its physical order ``perm``
    (default: ``native``)."""
    value = value.astype(np.float32)
    value = value.reshape([1] * (rank - value.ndim) + list(value.shape))
    return np.ascontiguousarray(value.transpose(native(rank) if perm is None else perm))


def _affine_clip(composite: Composite, ctx: LayoutContext, source: gs.Tensor, alpha: float,
                 beta: float, output: Optional[gs.Tensor], last: bool) -> int:
    """Mul2D(x, alpha) -> Sum2D(+beta) -> Clip(0, 1) on ``source``; the index of the Clip."""
    rank = len(static_shape(source))
    index, layout = ctx.require(source, native(rank))
    out = TensorLayout(layout.shape, layout.perm, layout.labels)
    for kind, const in (("Mul2D", alpha), ("Sum2D", beta)):
        layer = new_layer(composite, kind, [index], [out], out, {"activation_type": None},
                          [("operand", _scalar(rank, const))])
        layer.source_nodes = []
        index = ctx.emit(layer, None)
    attrs = {"a_min": 0.0, "a_max": 1.0}
    layer = new_layer(composite, "Clip", [index], [out], out, attrs)
    if not last:
        layer.source_nodes = []
    return ctx.emit(layer, output if last else None)


def lower_hardsigmoid(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("hardsigmoid")
    alpha = float(np.float32(attr(node, "alpha", 0.2)))
    beta = float(np.float32(attr(node, "beta", 0.5)))
    _affine_clip(composite, ctx, node.inputs[0], alpha, beta, composite.output, last=True)


def lower_hardswish(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("hardswish")
    source = node.inputs[0]
    gate = _affine_clip(composite, ctx, source, HARDSWISH_ALPHA, HARDSWISH_BETA, None,
                        last=False)
    index, layout = ctx.require(source, native(len(static_shape(source))))
    out = TensorLayout(tuple(static_shape(composite.output)), layout.perm, layout.labels)
    ctx.emit(new_layer(composite, "Mul2D", [index, gate], [layout, layout], out,
                       {"activation_type": None}), composite.output)


def lower_prelu(composite: Composite, ctx: LayoutContext) -> None:
    """Relu(x) - slope * Relu(-x): Relu, Mul2D(x, -1) + Relu, Mul2D(slope), Sub."""
    node = composite.binding.node("prelu")
    source = node.inputs[0]
    rank = len(static_shape(source))
    index, layout = ctx.require(source, native(rank))
    out = TensorLayout(layout.shape, layout.perm, layout.labels)
    steps = (("Relu", [index], {}, []),
             ("Mul2D", [index], {"activation_type": Activation.RELU},
              [("operand", _scalar(rank, -1.0))]))
    made = []
    for kind, inputs, attrs, consts in steps:
        layer = new_layer(composite, kind, inputs, [out], out, attrs, consts)
        layer.source_nodes = []   # partial results: the per-layer comparison skips them
        made.append(ctx.emit(layer, None))
    slope = physical_const(const_value(node.inputs[1]), rank)
    layer = new_layer(composite, "Mul2D", [made[1]], [out], out, {"activation_type": None},
                      [("operand", slope)])
    layer.source_nodes = []
    scaled = ctx.emit(layer, None)
    ctx.emit(new_layer(composite, "Sub", [made[0], scaled], [out, out], out,
                       {"activation_type": None}), composite.output)
