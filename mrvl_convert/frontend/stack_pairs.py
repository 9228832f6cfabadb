"""A quantized stack's ReduceMax made the Max of its tensors, each on the stack's grid.

onnxruntime's QDQ form of ``torch.stack([a, b, c], d).max(d)`` (attacut's three conv
branches, quantized) is ``Concat(axis=d) -> QuantizeLinear(s) -> DequantizeLinear(s) ->
ReduceMax(d) [-> QuantizeLinear(t)]``: ``stack_reductions.py`` does not see its Concat through
the pair, and no int8 layer reduces a 4-D tensor's last axis. Here each stacked tensor gets
the stack's pair of its own, so ``Max`` reads n dequantized tensors (``mrvl.qnn_max_pair``:
an int8 max pooling).

Requires: a graph whose activations' shapes are static.
Ensures: every float ``ReduceMax`` reading ``DequantizeLinear(QuantizeLinear(Concat))`` (each
read by nothing else, per-tensor pairs of one scale and zero point) of n >= 2 tensors of one
shape, each of size 1 on the concatenated axis, reducing exactly that axis, keeps its name and
becomes the last node of: a ``QuantizeLinear`` and a ``DequantizeLinear`` with the stack's
parameters on each tensor, their ``Max``; without ``keepdims`` then a ``Reshape`` dropping the
axis, after a copy of the pair of the one ``QuantizeLinear`` reading the reduction where there
is one, so that Max -> QuantizeLinear stays a chain (``rewritten``; the nodes before it new,
``derived`` from it; the Concat and the stack's pair ``merged`` into it).

Bound: exact. The Concat only moves values, so the stack's element ``k`` of a position is
``DQ(Q(x_k))`` either way, and ReduceMax selects the largest of them as Max does (without a
NaN). The pair after Max repeats the one that reads the reduction: ``Q(DQ(Q(m))) = Q(m)`` for one
grid, and a Reshape commutes with a per-tensor pair.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, only_reader, producer, reduce_axes, static_shape
from mrvl_convert.core.qdq_grid import grid
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


def rewrite_quantized_stacks(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every quantized stack's ReduceMax in place; True when one was (the caller then
    cleans up and sorts the graph)."""
    names, before = Names(graph), len(done.rewritten)
    outputs = {t.name for t in graph.outputs}
    for node in [n for n in graph.nodes if n.op == "ReduceMax" and len(n.outputs) == 1]:
        found = _stack(node, outputs)
        if found is not None:
            _rewrite(graph, node, found, outputs, done, names)
    return len(done.rewritten) > before


def _stack(node: gs.Node, outputs: set) -> Optional[Tuple[gs.Node, gs.Node, gs.Node]]:
    """(Concat, QuantizeLinear, DequantizeLinear) behind ``node``, or None."""
    chain, tensor = [], node.inputs[0]
    for op in ("DequantizeLinear", "QuantizeLinear", "Concat"):
        source = producer(tensor)
        if source is None or source.op != op or only_reader(tensor, outputs) is None:
            return None
        chain.append(source)
        tensor = source.inputs[0]
    dq, q, concat = chain
    if grid(q) is None or grid(q) != grid(dq) or len(concat.inputs) < 2:
        return None
    shape = static_shape(concat.outputs[0])
    if shape is None or not np.issubdtype(np.dtype(concat.outputs[0].dtype), np.floating):
        return None
    axis = int(attr(concat, "axis", 0)) % len(shape)
    shapes = [static_shape(t) for t in concat.inputs]
    if reduce_axes(node) != [axis] or shapes[0] is None or shapes[0][axis] != 1 \
            or any(s != shapes[0] for s in shapes):
        return None
    return concat, q, dq


def _rewrite(graph: gs.Graph, node: gs.Node, found: Tuple[gs.Node, gs.Node, gs.Node],
             outputs: set, done: Rewrites, names: Names) -> None:
    concat, q, dq = found
    operands = [_pair(graph, t, q, dq, node, done, names) for t in concat.inputs]
    keeps = int(attr(node, "keepdims", 1))
    for merged in found:
        done.merged[merged.name] = node.name
    n = len(operands)
    if keeps:
        _become(node, "Max", operands)
        done.rewritten[node.name] = f"ReduceMax over a quantized stack became a Max of {n}"
        return
    shape = static_shape(concat.inputs[0])
    m = _new(graph, "Max", operands, shape, f"{node.name}_max", node, done, names)
    reader = only_reader(node.outputs[0], outputs)
    if reader is not None and reader.op == "QuantizeLinear" and grid(reader) is not None:
        m = _pair(graph, m, reader, reader, node, done, names, dequantize=True)
    out_shape = np.array(static_shape(node.outputs[0]), dtype=np.int64)
    _become(node, "Reshape", [m, gs.Constant(names.fresh(f"{node.name}_shape"), out_shape)])
    done.rewritten[node.name] = (f"ReduceMax over a quantized stack became a Max of {n} and a "
                                 "Reshape dropping the axis")


def _become(node: gs.Node, op: str, inputs: List[gs.Tensor]) -> None:
    node.op = op
    node.attrs.clear()
    node.inputs.clear()
    node.inputs.extend(inputs)


def _pair(graph: gs.Graph, tensor: gs.Tensor, q: gs.Node, dq: gs.Node, node: gs.Node,
          done: Rewrites, names: Names, dequantize: bool = False) -> gs.Tensor:
    """``DequantizeLinear(QuantizeLinear(tensor))`` with the parameters of ``q`` (and of
    ``dq``; with ``dequantize`` the ones ``q`` quantizes with)."""
    shape = static_shape(tensor)
    base = f"{node.name}_{tensor.name}"
    quantized = _new(graph, "QuantizeLinear", [tensor] + list(q.inputs[1:]), shape,
                     f"{base}_q", node, done, names, q.outputs[0].dtype)
    params = list(q.inputs[1:]) if dequantize else list(dq.inputs[1:])
    return _new(graph, "DequantizeLinear", [quantized] + params, shape, f"{base}_dq", node,
                done, names)


def _new(graph: gs.Graph, op: str, inputs: List[gs.Tensor], shape: List[int], base: str,
         node: gs.Node, done: Rewrites, names: Names, dtype=None) -> gs.Tensor:
    """A new ``op`` node derived from ``node``; its output."""
    out = gs.Variable(names.fresh(f"{base}_out"), dtype=dtype or node.outputs[0].dtype,
                      shape=list(shape))
    name = names.fresh(base)
    graph.nodes.append(gs.Node(op, name, inputs=list(inputs), outputs=[out]))
    done.derived[name] = node.name
    return out
