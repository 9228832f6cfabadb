"""The ``E[x^2] - E[x]^2`` variance (flax's LayerNorm, as jax2tf writes it) rewritten to the
``E[(x - E[x])^2]`` form, which fp16 does not cancel.

Requires: a graph whose activations' shapes are static.
Ensures: every ``Sub(ReduceMean(x * x), m * m)`` with ``m = ReduceMean(x)`` over the same axes,
both keeping them (``x * x`` also as ``Pow(x, 2)``, ``m * m`` as ``Pow(m, 2)``), is
``ReduceMean(d * d)`` over those axes with ``d = Sub(x, m)`` (the model's own ``x - m`` when it
computes one, as a LayerNorm does); the Sub keeps its name and is listed in ``rewritten``, the
nodes added in ``derived``, the mean of squares and the squares that only it read in ``merged``.

Why: in fp16 (the accelerator's mode, one rounding per layer) ``E[x^2]`` and ``E[x]^2`` are each
rounded to 11 bits, so where the tokens' mean is large next to their spread the difference
keeps few correct bits or comes out negative: a byte classifier's label flips. ``d * d`` is
never negative and carries the spread's own bits.

Bound. Exact in real arithmetic. In float32 both forms are rounded: with C the count reduced
and u = 2**-24, to first order in u the original is within ``(3 C + 6) u E[x^2]`` of the exact
variance (the mean of squares ``(C + 2) u E[x^2]``, the squared mean ``(2 C + 3) u E[x^2]``,
the subtraction ``u``) and the rewritten form within ``(C + 4) u var + delta^2``, with delta
the mean's own error, ``|delta| <= (C + 1) u E|x|``; so the two differ by at most
``(4 C + 11) u E[x^2]`` (the second-order terms inside the last ``u``) while ``C u < 2**-10``.
The rewritten form's error scales with the variance, the original's with ``E[x^2]``: where
they differ, the rewritten one is the closer (tests/frontend/test_variance_form.py checks both
on onnxruntime).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, reduce_axes
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


def rewrite_variance(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every ``E[x^2] - E[x]^2`` in place; True when one was (the caller then cleans up
    and sorts the graph)."""
    names, before = Names(graph), len(done.rewritten)
    outputs = {t.name for t in graph.outputs}
    for node in list(graph.nodes):
        if node.op == "Sub" and len(node.inputs) == 2 and node.outputs:
            found = variance_parts(node)
            if found is not None:
                _rewrite(graph, node, found, done, names, outputs)
    return len(done.rewritten) > before


def _producer(tensor: gs.Tensor, op: str) -> Optional[gs.Node]:
    node = tensor.inputs[0] if tensor.inputs else None
    return node if node is not None and node.op == op else None


def _squared(tensor: gs.Tensor) -> Optional[Tuple[gs.Node, gs.Tensor]]:
    """(the node, v) when ``tensor`` is ``v * v`` or ``Pow(v, 2)``."""
    node = tensor.inputs[0] if tensor.inputs else None
    if node is None or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if node.op == "Mul" and a is b and not is_const(a):
        return node, a
    if node.op == "Pow" and not is_const(a) and is_const(b):
        exponent = const_value(b)
        if exponent.size == 1 and float(exponent.reshape(-1)[0]) == 2.0:
            return node, a
    return None


def _mean(tensor: gs.Tensor) -> Optional[gs.Node]:
    node = _producer(tensor, "ReduceMean")
    if node is None or not int(attr(node, "keepdims", 1)) or reduce_axes(node) is None:
        return None
    return node


def variance_parts(sub: gs.Node) -> Optional[Tuple[gs.Node, gs.Node, gs.Node, gs.Node]]:
    """(mean of squares, x * x, m * m, m's ReduceMean) when ``sub`` is ``E[x^2] - E[x]^2``."""
    square_mean = _mean(sub.inputs[0])
    squared_mean = _squared(sub.inputs[1])
    if square_mean is None or squared_mean is None:
        return None
    squares = _squared(square_mean.inputs[0])
    mean = _mean(squared_mean[1])
    if squares is None or mean is None or mean.inputs[0] is not squares[1]:
        return None
    if reduce_axes(mean) != reduce_axes(square_mean) or not _floating(mean.inputs[0]):
        return None
    return square_mean, squares[0], squared_mean[0], mean


def _floating(tensor: gs.Tensor) -> bool:
    return tensor.dtype is not None and np.issubdtype(np.dtype(tensor.dtype), np.floating)


def _centred(graph: gs.Graph, x: gs.Tensor, m: gs.Tensor, base: str, names: Names,
             done: Rewrites, sub: gs.Node) -> gs.Tensor:
    """The model's own ``x - m`` when it computes one, else a new Sub."""
    for reader in m.outputs:
        if reader.op == "Sub" and reader is not sub and list(reader.inputs) == [x, m]:
            return reader.outputs[0]
    d = gs.Variable(names.fresh(f"{base}_centred"), dtype=x.dtype, shape=x.shape)
    node = gs.Node("Sub", names.fresh(f"{base}_centre"), inputs=[x, m], outputs=[d])
    graph.nodes.append(node)
    done.derived[node.name] = sub.name
    return d


def _rewrite(graph: gs.Graph, sub: gs.Node, found, done: Rewrites, names: Names,
             outputs: set) -> None:
    square_mean, squares, squared_mean, mean = found
    x, m = mean.inputs[0], mean.outputs[0]
    d = _centred(graph, x, m, sub.name, names, done, sub)
    dd = gs.Variable(names.fresh(f"{sub.name}_squares"), dtype=x.dtype, shape=x.shape)
    square = gs.Node("Mul", names.fresh(f"{sub.name}_square"), inputs=[d, d], outputs=[dd])
    graph.nodes.append(square)
    done.derived[square.name] = sub.name
    sub.op = "ReduceMean"
    sub.attrs.clear()
    sub.attrs.update({k: v for k, v in square_mean.attrs.items()})
    sub.inputs.clear()
    sub.inputs.extend([dd, *square_mean.inputs[1:]])
    for node in _only_for(sub, [square_mean, squares, squared_mean], outputs):
        done.merged[node.name] = sub.name
    done.rewritten[sub.name] = (
        f"E[x^2] - E[x]^2 ({square_mean.name} - {squared_mean.name}) became E[(x - E[x])^2] "
        f"(mean {mean.name}): fp16 does not cancel it; in float32 within (4 C + 11) 2**-24 "
        "E[x^2] of the original (frontend/variance_form.py)")


def _only_for(sub: gs.Node, nodes: List[gs.Node], outputs: set) -> List[gs.Node]:
    """The pattern's nodes that nothing else reads: cleanup removes them, merged into ``sub``.
    Others reading the mean of squares or a square keep them (they are not merged)."""
    pattern = {id(n) for n in nodes} | {id(sub)}
    return [n for n in nodes if n.outputs[0].name not in outputs
            and all(id(r) in pattern for r in n.outputs[0].outputs)]
