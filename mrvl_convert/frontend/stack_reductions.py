"""A reduction over a stacked axis, made the elementwise chain of the stacked tensors.

``torch.stack([a, b, c], d).max(d)`` reaches ONNX as ``Unsqueeze`` of each tensor on ``d``,
``Concat(axis=d)`` and ``ReduceMax(axes=[d])`` (attacut's three conv branches). The layer set's
Concat joins channels and its ReduceMax takes one axis of a 3-D tensor; ``Max(a, b, c)`` is
elementwise (``layers/_max_pairs.py`` lowers it, exactly).

Requires: a graph whose activations' shapes are static.
Ensures: every ``Reduce{Max,Min,Sum,Mean}`` of floats whose input is a ``Concat`` of n >= 2
tensors of one shape (the Concat read by nothing else) each of size 1 on the concatenated axis,
reducing exactly that axis (axes as attribute or input, negative or not; opsets 11 to 18),
keeps its name and becomes the last node of: one ``Max`` / ``Min`` of the n tensors (which
``layers/_max_pairs.py`` computes as one exact max pooling), or a left-to-right chain of n - 1
binary ``Add`` of them, then for a mean a ``Mul`` by ``1/n``, then without
``keepdims`` a ``Reshape`` dropping the axis (``rewritten``; the nodes before it new, each
``derived`` from it). Without ``keepdims``, where every tensor is an ``Unsqueeze`` on that axis
the chain reads their inputs instead and needs no Reshape. The Concat, and the Unsqueezes read
by it alone, are ``merged`` into the reduction.

Bound: Max and Min are exact on inputs without a NaN (each selects one of its operands; where
one holds a NaN the two may differ, as ``global_max.py`` says of its pool). A sum is reordered:
with u the unit roundoff of the type and S = sum |x_i|, onnxruntime's order and the chain's
each lie within (n - 1) u S of the exact sum, so they differ by at most 2 (n - 1) u S. A mean
adds the rounding of ``1/n`` and of the product and the reduction's own final rounding (3 u of
|mean| <= S / n): |after - before| <= 2 (n + 1) u S / n, to first order in u.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, producer, reduce_axes, squeeze_axes, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

_CHAIN = {"ReduceMax": "Max", "ReduceMin": "Min", "ReduceSum": "Add", "ReduceMean": "Add"}


def rewrite_stack_reductions(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every reduction over a stacked axis in place; True when one was (the caller then
    cleans up and sorts the graph)."""
    names, before = Names(graph), len(done.rewritten)
    for node in list(graph.nodes):
        operands = _stacked_operands(graph, node)
        if operands is not None:
            _rewrite(graph, node, operands, done, names)
    return len(done.rewritten) > before


def _stacked_operands(graph: gs.Graph, node: gs.Node) -> Optional[List[gs.Tensor]]:
    """The Concat's inputs ``node`` reduces elementwise, or None when it is not that form."""
    if node.op not in _CHAIN or len(node.outputs) != 1 or not node.inputs:
        return None
    x = node.inputs[0]
    concat = producer(x)
    shape = static_shape(x)
    if concat is None or concat.op != "Concat" or len(x.outputs) != 1 or x in graph.outputs \
            or shape is None or 0 in shape or not _floating(x) or len(concat.inputs) < 2:
        return None
    axis = int(attr(concat, "axis", 0)) % len(shape)
    if reduce_axes(node) != [axis]:
        return None
    shapes = [static_shape(t) for t in concat.inputs]
    if any(s is None or len(s) != len(shape) or s[axis] != 1 for s in shapes) \
            or any(s != shapes[0] for s in shapes):  # equal shapes: the chain broadcasts none
        return None
    return list(concat.inputs)


def _floating(tensor: gs.Tensor) -> bool:
    return tensor.dtype is not None and np.issubdtype(np.dtype(tensor.dtype), np.floating)


def _unstacked(operands: List[gs.Tensor], axis: int) -> Optional[List[gs.Tensor]]:
    """The Unsqueezes' inputs when every operand is an Unsqueeze on ``axis`` alone, else None."""
    sources = []
    for tensor in operands:
        node = producer(tensor)
        rank = len(static_shape(tensor))
        axes = squeeze_axes(node) if node is not None and node.op == "Unsqueeze" else None
        if axes is None or [a % rank for a in axes] != [axis]:
            return None
        sources.append(node.inputs[0])
    return sources


def _rewrite(graph: gs.Graph, node: gs.Node, operands: List[gs.Tensor], done: Rewrites,
             names: Names) -> None:
    out, op, n = node.outputs[0], _CHAIN[node.op], len(operands)
    keeps = int(attr(node, "keepdims", 1))
    sources = None if keeps else _unstacked(operands, reduce_axes(node)[0])
    rest = (sources or operands)[1:]
    if op in ("Max", "Min"):  # one n-ary node: layers/_max_pairs.py pools the n at once
        steps = [(op, rest)]
        what = f"{node.op} over a stacked axis became a {op} of {n}"
    else:
        steps = [(op, [t]) for t in rest]
        what = f"{node.op} over a stacked axis became a chain of {n - 1} {op}"
    if node.op == "ReduceMean":
        inverse = np.array(1.0 / n, dtype=np.dtype(out.dtype))
        steps.append(("Mul", [gs.Constant(names.fresh(f"{node.name}_inverse_n"), inverse)]))
        what += f" and a Mul by 1/{n}"
    if not keeps and sources is None:  # the axis stays in the operands: a Reshape drops it
        shape = np.array(static_shape(out), dtype=np.int64)
        steps.append(("Reshape", [gs.Constant(names.fresh(f"{node.name}_shape"), shape)]))
        what += " and a Reshape dropping the axis"
    acc = (sources or operands)[0]
    for k, (step, tensors) in enumerate(steps[:-1], start=1):
        acc = _step(graph, step, [acc] + tensors, f"{node.name}_{step.lower()}{k}", node, done,
                    names)
    _merge_stack(producer(node.inputs[0]), node, sources is not None, done)
    node.op = steps[-1][0]
    node.attrs.clear()
    node.inputs.clear()
    node.inputs.extend([acc] + steps[-1][1])
    done.rewritten[node.name] = what


def _merge_stack(concat: gs.Node, node: gs.Node, unstacked: bool, done: Rewrites) -> None:
    """The Concat (and the Unsqueezes the chain reads past, where nothing else reads them):
    what they did is done by ``node`` now."""
    done.merged[concat.name] = node.name
    for tensor in concat.inputs if unstacked else []:
        if len(tensor.outputs) == 1:
            done.merged[producer(tensor).name] = node.name


def _step(graph: gs.Graph, op: str, inputs: List[gs.Tensor], base: str, node: gs.Node,
          done: Rewrites, names: Names) -> gs.Tensor:
    """A new ``op(*inputs)`` node derived from ``node``; its output (the first input's shape
    and type)."""
    out = gs.Variable(names.fresh(f"{base}_out"), dtype=node.outputs[0].dtype,
                      shape=static_shape(inputs[0]))
    name = names.fresh(base)
    graph.nodes.append(gs.Node(op, name, inputs=list(inputs), outputs=[out]))
    done.derived[name] = node.name
    return out
