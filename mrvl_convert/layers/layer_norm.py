"""LayerNormalization on the accelerator, as a chain of existing layers.

The newer codegen has no LayerNorm layer (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc), so the opset-17 ``LayerNormalization`` op over the
last axis lowers to nine layers (seven once ``frontend/fc_folds.py`` has folded its scale
and bias into the FCs reading it), each as its codegen function writes it:

    m = ReduceMean(x)          CreateCompositeMrvlReduceLayer (keepdims)
    d = Sub(x, m)              CreateCompositeMrvlSubtractLayer (m broadcasts into x)
    q = Mul2D(d, d)            CreateCompositeMrvlMulLayer
    v = ReduceMean(q)
    v = Sum2D(v, epsilon)      CreateCompositeMrvlSumLayer (input_const_name)
    r = Rsqrt(v)               CreateCompositeMrvlActivationLayer
    n = Mul2D(d, r)            (r broadcasts into d)
    n = Mul2D(n, gamma)        (none when gamma is all ones: x * 1 is x)
    y = Sum2D(n, beta)         (none when the bias is absent or zeros)

The decomposed form exporters write (ReduceMean, Sub, Pow 2 or Mul(d, d), ReduceMean, Add eps,
Sqrt, Div, Mul gamma, Add beta) maps node by node to the same layers; its one gap was
``Div(d, Sqrt(v))``, a division by an activation, which becomes Rsqrt(v) then Mul2D(d, r)
(``lower_sqrt_div``). ``Sqrt`` then ``Reciprocal`` then ``Mul`` is Rsqrt and Mul2D already.

Each layer rounds to fp16 once; the lowering rewrites nothing in the ONNX graph, so a LayerNorm
left on CPU computes what the model does (apart from ``fc_folds.py``, which moves a pre-norm
LayerNorm's scale and bias into the FCs after it, within the bound stated there). fp16 range:
every layer stays finite while each |x - mean(x)| <= 255 along the normalised axis (then
d * d <= 65025 < 65504, and their mean is no larger); r <= 1 / sqrt(epsilon), and
|d * r| <= sqrt(C) for C normalised values, since d**2 <= C * var. Past that bound d * d overflows and the simulator warns (Fp16RangeWarning).
An epsilon below fp16's smallest normal (2**-14) is held as a subnormal, on a grid of 2**-24.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, present, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._decompose import physical_const
from mrvl_convert.layers._lowering import new_layer
from mrvl_convert.layers.reduce import MEAN_AXES, _order

_NONE: Dict[str, Any] = {"activation_type": None}


def layer_norm_axis(node: gs.Node) -> int:
    """The LayerNormalization's first normalised axis, 0 <= axis < rank."""
    rank = len(static_shape(node.inputs[0]))
    axis = int(attr(node, "axis", -1))
    return axis + rank if axis < 0 else axis


class _Chain:
    """Emits the layers of one decomposition: each before the last names no source node, so
    the per-layer comparison skips the partial results."""

    def __init__(self, composite: Composite, ctx: LayoutContext, rank: int,
                 perm: Sequence[int]) -> None:
        self.composite, self.ctx, self.rank, self.perm = composite, ctx, rank, tuple(perm)

    def layer(self, kind: str, inputs: Sequence[int], layouts: Sequence[TensorLayout],
              out: TensorLayout, attrs: Dict[str, Any], const: Optional[np.ndarray] = None,
              output: Optional[gs.Tensor] = None) -> int:
        consts = [] if const is None else [("operand", physical_const(const, self.rank,
                                                                      self.perm))]
        layer = new_layer(self.composite, kind, inputs, layouts, out, dict(attrs), consts)
        if output is None:
            layer.source_nodes = []
        return self.ctx.emit(layer, output)


def lower_layer_norm(composite: Composite, ctx: LayoutContext) -> None:
    """LayerNormalization over the last axis as ReduceMean .. Sum2D (module docstring)."""
    node = composite.binding.node("layer_norm")
    x = node.inputs[0]
    rank, axis = len(static_shape(x)), layer_norm_axis(node)
    perm = _order(ctx, x, axis, MEAN_AXES)
    xi, full = ctx.require(x, perm)
    narrow = TensorLayout(tuple(1 if i == axis else n for i, n in enumerate(full.shape)),
                          full.perm, full.labels)
    chain = _Chain(composite, ctx, rank, perm)
    mean = {"axis": perm.index(axis), "keepdims": 1}
    eps = np.float32(attr(node, "epsilon", 1e-5))
    scale = const_value(node.inputs[1]).astype(np.float32)
    bias_t = present(node, 2)
    # x * 1 and x + 0 are exact: a scale of ones and a bias of zeros (or none), as fc_folds.py
    # leaves them after folding them into the FCs, emit no layer.
    tail = [] if np.all(scale == 1) else [("Mul2D", scale)]
    bias = None if bias_t is None else const_value(bias_t).astype(np.float32)
    if bias is not None and np.any(bias):   # x + 0 is x (up to the sign of a zero)
        tail.append(("Sum2D", bias))
    m = chain.layer("ReduceMean", [xi], [full], narrow, mean)
    d = chain.layer("Sub", [xi, m], [full, narrow], full, _NONE)
    q = chain.layer("Mul2D", [d, d], [full, full], full, _NONE)
    v = chain.layer("ReduceMean", [q], [full], narrow, mean)
    v = chain.layer("Sum2D", [v], [narrow], narrow, _NONE, np.full([1] * rank, eps))
    r = chain.layer("Rsqrt", [v], [narrow], narrow, {})
    n = chain.layer("Mul2D", [d, r], [full, narrow], full, _NONE,
                    output=None if tail else composite.output)
    for i, (kind, const) in enumerate(tail):
        last = i == len(tail) - 1
        n = chain.layer(kind, [n], [full], full, _NONE, const,
                        output=composite.output if last else None)


def lower_sqrt_div(composite: Composite, ctx: LayoutContext) -> None:
    """Div(d, Sqrt(v)) as Rsqrt(v) then Mul2D(d, r), r broadcasting into d."""
    sqrt, div = composite.binding.node("sqrt"), composite.binding.node("quotient")
    rank = len(static_shape(div.outputs[0]))
    perm = ctx.keep_order(div.inputs[0], native(rank))
    di, full = ctx.require(div.inputs[0], perm)
    vi, narrow = ctx.require(sqrt.inputs[0], perm)
    chain = _Chain(composite, ctx, rank, perm)
    r = chain.layer("Rsqrt", [vi], [narrow], TensorLayout(narrow.shape, narrow.perm,
                                                            narrow.labels), {})
    out = TensorLayout(tuple(static_shape(composite.output)), full.perm, full.labels)
    chain.layer("Mul2D", [di, r], [full, narrow], out, _NONE, output=composite.output)
