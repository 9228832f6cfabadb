"""A normalisation in an exporter's own spelling rewritten to the decomposed LayerNorm form the
layers take node by node (``layers/layer_norm.py``): ``d = x - m``, ``n = d * r``, then
``* gamma`` and ``+ beta``, ``m`` the mean and ``r = 1 / sqrt(v + eps)`` over the norm's axes.

Requires: a canonical graph with static activation shapes (after ``rsqrt_forms.py``).
Ensures: two spellings are rewritten, each only where every statistic is computed from ``x``
itself over one set of axes A (the norm's: a normalisation, not a trained BatchNormalization):

- **tf's batchnorm formula** (Keras ``LayerNormalization`` as ``tf.nn.batch_normalization``):
  ``Add(Mul(x, s), Sub(beta, Mul(m, s)))``, ``s = Mul(r, gamma)`` or ``s = r``, with
  ``m = ReduceMean(x, A, keepdims)`` and r of m's shape, becomes ``Add(Mul(Mul(d, r), gamma),
  beta)``, d the model's own ``x - m`` when it computes one. ``r * gamma`` was an outer product
  of a statistic and a weight (``[1, 1, C] x [1, T, 1]``) no layer takes.
- **a BatchNormalization with computed statistics** (tf2onnx's FusedBatchNormV3 in training
  form: Keras ``LayerNormalization`` over several axes): its mean ``ReduceMean(x, A)`` and its
  variance ``ReduceSumSquare(x - m, A) / count``, ``ReduceMean((x - m)^2, A)`` (through
  Squeeze/Reshape to ``[C]``), A every axis but 1, become ``ReduceMean`` over A without its
  unit axes (one axis where only one is longer than 1, as the Reduce layer takes), Sub,
  ``Mul(d, d)``, ReduceMean, ``Add(eps)``, Sqrt, Reciprocal, Mul, then the constant scale and
  bias on ``[1, C, 1, ..]`` (none for ones and zeros).

In a QDQ model x may reach the mean and the norm through two DequantizeLinear copies of one
quantized tensor (``qdq.py`` gives each reader its own): equal copies are one x. Only float
nodes are rewritten: a pair between the pieces (an int8 Add of ``x s`` and the shift) stops it.

Then ``norm_means.py`` makes a norm's mean over several axes one-axis means in turn.

The rewritten node keeps its name (``rewritten``); the nodes added are ``derived`` from it, the
statistics' nodes only the norm read are ``merged`` into it.

Bound. Both rewrites are exact in real arithmetic (``x s + beta - m s = (x - m) s``; the BN
computes ``(x - m) scale / sqrt(v + eps) + bias``). In float32, u = 2**-24, to first order:
the batchnorm formula and its rewrite share m and r and differ only in their last four
roundings, by at most ``8 u (|x s| + |m s| + |beta|)`` per element; the rewrite has no
cancellation of ``x s`` against ``m s``, which in fp16 (2**-11) loses the bits of a spread small
next to its mean. The BN's rewrite recomputes the mean over the same values (unit axes
dropped) and the variance as a mean of C squares (C the count over A) where the model divided a
sum of squares by C; with ``a = scale / sqrt(v + eps)`` and M the largest |x| along the norm's
axes, each form is within ``(C + 8) u |(x - m) a| + (C + 1) u M |a| + 3 u (|x a| + |m a| +
|bias|)`` of the exact value (the variance's error first order in the mean's vanishes, as
``sum(x - m) = 0``), so they differ by at most ``(4 C + 30) u M |a| + 6 u |bias|``.
tests/frontend/test_norm_forms.py checks both bounds on onnxruntime.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, const_value, is_const, reduce_axes, same_value,
                                     static_shape)
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.norm_means import split_norm_means

_VIEWS = ("Squeeze", "Reshape", "Unsqueeze", "Flatten")


def rewrite_norms(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite every norm of the two spellings in place; True when one was (the caller then
    cleans up and sorts the graph)."""
    build = _Builder(graph, opset, done)
    before = len(done.rewritten)
    for node in list(graph.nodes):
        if node.op == "Add" and len(node.inputs) == 2:
            _batchnorm_formula(build, node)
        elif node.op == "BatchNormalization":
            _computed_bn(build, node)
    split_norm_means(graph, opset, done)  # the norms' multi-axis means, one axis at a time
    return len(done.rewritten) > before


class _Builder:
    """New nodes and constants with fresh names, each recorded as derived from ``origin``."""

    def __init__(self, graph: gs.Graph, opset: int, done: Rewrites) -> None:
        self.graph, self.opset, self.done, self.names = graph, opset, done, Names(graph)
        self.outputs = {t.name for t in graph.outputs}

    def node(self, op: str, inputs: Sequence[gs.Tensor], like: gs.Tensor, origin: gs.Node,
             attrs: Optional[Dict] = None, shape: Optional[List[int]] = None) -> gs.Tensor:
        out = gs.Variable(self.names.fresh(f"{origin.name}_{op.lower()}"), dtype=like.dtype,
                          shape=list(shape) if shape is not None else like.shape)
        node = gs.Node(op, self.names.fresh(f"{origin.name}_{op.lower()}"),
                       attrs=dict(attrs or {}), inputs=list(inputs), outputs=[out])
        self.graph.nodes.append(node)
        self.done.derived[node.name] = origin.name
        return out

    def const(self, value: np.ndarray, origin: gs.Node) -> gs.Constant:
        return gs.Constant(self.names.fresh(f"{origin.name}_const"),
                           np.asarray(value, np.float32))

    def mean(self, x: gs.Tensor, axes: List[int], origin: gs.Node) -> gs.Tensor:
        """ReduceMean over ``axes`` keeping them, in the opset's spelling of its axes."""
        shape = [1 if i in axes else n for i, n in enumerate(static_shape(x))]
        if self.opset >= 18:
            axes_t = gs.Constant(self.names.fresh(f"{origin.name}_axes"),
                                 np.asarray(axes, np.int64))
            return self.node("ReduceMean", [x, axes_t], x, origin, {"keepdims": 1}, shape)
        return self.node("ReduceMean", [x], x, origin, {"axes": axes, "keepdims": 1}, shape)

    def merge(self, nodes: Sequence[gs.Node], into: gs.Node) -> None:
        """The pattern's nodes nothing outside it reads: cleanup removes them."""
        pattern = {id(n) for n in nodes} | {id(into)}
        for node in nodes:
            if node.outputs[0].name not in self.outputs and all(
                    id(r) in pattern for r in node.outputs[0].outputs):
                self.done.merged[node.name] = into.name


def _producer(tensor: gs.Tensor, *ops: str) -> Optional[gs.Node]:
    node = tensor.inputs[0] if tensor.inputs else None
    return node if node is not None and node.op in ops else None


def _through_views(tensor: gs.Tensor) -> Tuple[gs.Tensor, List[gs.Node]]:
    """The tensor before any chain of Squeeze/Reshape/Unsqueeze/Flatten, and that chain."""
    chain = []
    while (node := _producer(tensor, *_VIEWS)) is not None:
        chain.append(node)
        tensor = node.inputs[0]
    return tensor, chain


def _other(node: gs.Node, tensor: gs.Tensor) -> Optional[gs.Tensor]:
    a, b = node.inputs
    return b if a is tensor else a if b is tensor else None


def _mean_of(tensor: gs.Tensor) -> Optional[Tuple[gs.Node, List[int]]]:
    """(the ReduceMean, its axes) when ``tensor`` is a mean over static axes."""
    node = _producer(tensor, "ReduceMean")
    if node is None or not node.outputs or static_shape(node.inputs[0]) is None:
        return None
    axes = reduce_axes(node)
    return None if axes is None else (node, axes)


def _batchnorm_formula(build: _Builder, add: gs.Node) -> None:
    for scaled, shift in (add.inputs, add.inputs[::-1]):
        found = _formula_parts(scaled, shift)
        if found is not None:
            _rewrite_formula(build, add, *found)
            return


def _formula_parts(scaled: gs.Tensor, shift: gs.Tensor):
    """(x, m, r, gamma, beta, nodes) when ``scaled = x * s`` and ``shift = beta - m * s``."""
    mul, minus = _producer(scaled, "Mul"), _difference(shift)
    if mul is None or minus is None:
        return None
    beta, mean_mul, shift_nodes = minus
    for s in mul.inputs:
        x, m = _other(mul, s), _other(mean_mul, s)
        stat = _mean_of(m) if m is not None else None
        if x is None or stat is None or not same_value(stat[0].inputs[0], x) or x is s:
            continue
        if not int(attr(stat[0], "keepdims", 1)) or not _floating(x):
            continue
        r, gamma, scale = _scale_parts(s, static_shape(m))
        if r is not None:
            return x, m, r, gamma, beta, [mul, mean_mul, *shift_nodes, *scale]
    return None


def _difference(shift: gs.Tensor) -> Optional[Tuple[gs.Tensor, gs.Node, List[gs.Node]]]:
    """(beta, the Mul computing t, the nodes) when ``shift`` is ``beta - t``: a Sub, or the
    ``Add(Mul(t, -1), beta)`` (or ``Neg``) canonicalize writes for a Sub from a constant."""
    node = _producer(shift, "Sub", "Add")
    if node is None or len(node.inputs) != 2:
        return None
    if node.op == "Sub":
        t = _producer(node.inputs[1], "Mul")
        return None if t is None or not is_const(node.inputs[0]) else (node.inputs[0], t, [node])
    for beta, negated in (node.inputs, node.inputs[::-1]):
        neg = _producer(negated, "Mul", "Neg")
        if not is_const(beta) or neg is None:
            continue
        if neg.op == "Mul":
            minus_one = [t for t in neg.inputs if is_const(t)]
            if (len(minus_one) != 1 or const_value(minus_one[0]).size != 1
                    or float(const_value(minus_one[0]).reshape(-1)[0]) != -1.0):
                continue
        t = _producer(next(t for t in neg.inputs if not is_const(t)), "Mul")
        if t is not None:
            return beta, t, [node, neg]
    return None


def _scale_parts(s: gs.Tensor, stat_shape) -> Tuple[Optional[gs.Tensor], Optional[gs.Tensor],
                                                    List[gs.Node]]:
    """(r, gamma or None, [the Mul]) when s is ``r * gamma`` or r itself, r a statistic of the
    mean's shape (it then broadcasts into x - m as the Mul2D of a norm does)."""
    node = _producer(s, "Mul")
    if node is not None:
        a, b = node.inputs
        for r, gamma in ((a, b), (b, a)):
            if is_const(gamma) and not is_const(r) and static_shape(r) == stat_shape:
                return r, gamma, [node]
    if not is_const(s) and static_shape(s) == stat_shape:
        return s, None, []
    return None, None, []


def _floating(tensor: gs.Tensor) -> bool:
    return tensor.dtype is not None and np.issubdtype(np.dtype(tensor.dtype), np.floating)


def _centred(build: _Builder, x: gs.Tensor, m: gs.Tensor, origin: gs.Node) -> gs.Tensor:
    """The model's own ``x - m`` when it computes one, else a new Sub."""
    for reader in m.outputs:
        if reader.op == "Sub" and reader.inputs[1] is m and same_value(reader.inputs[0], x):
            return reader.outputs[0]
    return build.node("Sub", [x, m], x, origin)


def _rewrite_formula(build: _Builder, add: gs.Node, x, m, r, gamma, beta, nodes) -> None:
    n = build.node("Mul", [_centred(build, x, m, add), r], x, add)
    if gamma is not None:
        n = build.node("Mul", [n, gamma], add.outputs[0], add)
    add.inputs.clear()
    add.inputs.extend([n, beta])
    build.merge(nodes, add)
    build.done.rewritten[add.name] = (
        f"tf's batchnorm formula x * s + (beta - m * s) became (x - m) * r * gamma + beta "
        f"(mean {m.inputs[0].name}): the outer product r * gamma is gone and fp16 does not "
        "cancel x * s against m * s; in float32 within 8 * 2**-24 (|x s| + |m s| + |beta|) "
        "(frontend/norm_forms.py)")


def _computed_bn(build: _Builder, bn: gs.Node) -> None:
    found = _bn_statistics(bn)
    if found is None:
        return
    x, axes, nodes = found
    rank = len(static_shape(x))
    channels = static_shape(x)[1]
    scale, bias = (const_value(t).astype(np.float32).reshape(-1) for t in bn.inputs[1:3])
    if scale.size != channels or bias.size != channels:
        return
    m = build.mean(x, axes, bn)
    d = build.node("Sub", [x, m], x, bn)
    v = build.mean(build.node("Mul", [d, d], x, bn), axes, bn)
    eps = build.const(np.float32(attr(bn, "epsilon", 1e-5)), bn)
    r = build.node("Reciprocal", [build.node("Sqrt", [build.node("Add", [v, eps], v, bn)], v, bn)],
                   v, bn)
    steps = [("Mul", [d, r])]
    per_channel = [1, channels] + [1] * (rank - 2)
    if not np.all(scale == 1):   # x * 1 is x
        steps.append(("Mul", [build.const(scale.reshape(per_channel), bn)]))
    if np.any(bias):             # x + 0 is x (up to the sign of a zero)
        steps.append(("Add", [build.const(bias.reshape(per_channel), bn)]))
    _chain_into(build, bn, x, steps)
    build.merge(nodes, bn)
    build.done.rewritten[bn.name] = (
        f"a BatchNormalization with statistics computed over axes {axes} of its input became "
        f"the LayerNorm form over them (mean {m.inputs[0].name}); in float32 within "
        "(4 C + 30) 2**-24 M |a| + 6 2**-24 |bias| (frontend/norm_forms.py)")


def _chain_into(build: _Builder, last: gs.Node, x: gs.Tensor, steps) -> None:
    """Each step a new node reading the one before, the last done by ``last`` itself (its name
    and output kept)."""
    op, inputs = steps[0]
    for next_op, next_inputs in steps[1:]:
        prev = build.node(op, inputs, x, last)
        op, inputs = next_op, [prev, *next_inputs]
    last.op = op
    last.attrs.clear()
    last.inputs.clear()
    last.inputs.extend(inputs)


def _bn_statistics(bn: gs.Node) -> Optional[Tuple[gs.Tensor, List[int], List[gs.Node]]]:
    """(x, the norm's axes without unit ones, the statistics' nodes) when the BN's mean and
    variance are computed from its own input over every axis but 1."""
    if len(bn.inputs) != 5 or len(bn.outputs) != 1 or int(attr(bn, "training_mode", 0)):
        return None
    x = bn.inputs[0]
    shape = static_shape(x)
    if shape is None or len(shape) < 2 or not _floating(x):
        return None
    if not all(is_const(t) for t in bn.inputs[1:3]) or any(is_const(t) for t in bn.inputs[3:]):
        return None
    full = [i for i in range(len(shape)) if i != 1]
    mean_t, mean_views = _through_views(bn.inputs[3])
    stat = _mean_of(mean_t)
    if stat is None or not same_value(stat[0].inputs[0], x) or stat[1] != full:
        return None
    found = _variance_of(_through_views(bn.inputs[4])[0], x, mean_t, full, shape)
    if found is None:
        return None
    axes = [i for i in full if shape[i] != 1]
    if not axes:
        return None
    return x, axes, [stat[0], *mean_views, *_through_views(bn.inputs[4])[1], *found]


def _variance_of(v: gs.Tensor, x: gs.Tensor, m: gs.Tensor, axes: List[int],
                 shape: List[int]) -> Optional[List[gs.Node]]:
    """The nodes computing v when it is the mean of ``(x - m)^2`` over ``axes``: ``ReduceMean``
    of a square, or ``ReduceSumSquare`` divided by (or times the inverse of) the count."""
    count = float(np.prod([shape[i] for i in axes]))
    node = _producer(v, "Div", "Mul", "ReduceMean")
    if node is None:
        return None
    if node.op == "ReduceMean":
        square = _producer(node.inputs[0], "Mul")
        if (reduce_axes(node) != axes or square is None or square.inputs[0] is not
                square.inputs[1] or not _centred_by(square.inputs[0], x, m)):
            return None
        return [node, square, square.inputs[0].inputs[0]]
    sums = _producer(node.inputs[0], "ReduceSumSquare")
    if sums is None or not is_const(node.inputs[1]) or reduce_axes(sums) != axes:
        return None
    k = const_value(node.inputs[1]).reshape(-1)
    want = np.float32(count if node.op == "Div" else 1.0 / count)
    if k.size != 1 or np.float32(k[0]) != want:
        return None
    if not _centred_by(sums.inputs[0], x, m):
        return None
    return [node, sums, sums.inputs[0].inputs[0]]


def _centred_by(d: gs.Tensor, x: gs.Tensor, m: gs.Tensor) -> bool:
    sub = _producer(d, "Sub")
    return sub is not None and same_value(sub.inputs[0], x) and sub.inputs[1] is m
