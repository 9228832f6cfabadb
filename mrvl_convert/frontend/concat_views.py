"""A Concat of 2-D or 3-D tensors on a non-leading axis as the 4-D channel Concat of views.

The layer set concatenates 4-D tensors on their channel axis, batch 1. Exporters join a
bidirectional cell's directions on the last axis of its time-major output ``[T, N, h]``
(tf2onnx) and the final states ``[N, h]`` of two cells on their features: 3-D and 2-D Concats
that ``rank_lift.py`` does not take, for two reasons. It lifts regions grown from a seed that
fixes a channel-first layout (a Conv, a pool, a BatchNormalization), and a Concat beside an
unrolled cell's FCs has none; and its view of ``[N, C, L]`` is ``[N, C, 1, L]``, which keeps
axis 0 (here time, over 1) as the batch and puts the last axis on W, not on the channels.

Every such Concat (one that ``rank_lift.py`` left: it runs after the lifts) joins each input
``x_i`` of shape ``S_i`` on axis ``a >= 1``. With ``P = prod(S[:a])`` (the same for every input)
and ``Q_i = prod(S_i[a:])``, it is the Concat on axis 1 of the ``[P, Q_i]`` views (row p of the
output is row p of each input, one after another), and that is a channel Concat of 4-D views:

- ``P == 1``: each input viewed as ``[1, Q_i, 1, 1]``, the Concat on axis 1, the output viewed
  back as ``S``.
- a batch-1 model (every graph input's axis 0 is 1, so no tensor's axis 0 is a batch of several
  samples and an axis 0 over 1 is data: time, directions), ``P > 1``: each input viewed as
  ``[1, P, 1, Q_i]`` and transposed to NCHW ``[1, Q_i, P, 1]`` (Transpose ``0, 3, 1, 2``: the
  NHWC layout the view already holds, a relabel that costs nothing), the Concat on axis 1, and
  back by Transpose ``0, 2, 3, 1`` and a Reshape to ``S``.
- otherwise, ``a == 1``: each input viewed as ``[S_0, Q_i, 1, 1]``, axis 0 kept (a batch stays
  a batch, so a region can still run in chunks), the Concat on axis 1.

Any other Concat (axis 0, a constant input, rank 4 or more, a shape not static, a non-float
tensor, a model of batch over 1 with ``a >= 2``) is unchanged.

Requires: static shapes on the Concats it takes (canonicalize runs it after the rank lifts).
Ensures: exact (Reshape, Transpose and Concat move data only: every output element is the same
input element as before); the Concat keeps its name (``rewritten``), and its output tensor,
which the last view writes now, keeps its name and readers, so the graph's outputs are as
before; the added Reshapes and Transposes are ``derived`` from it.

Not done here: in an int8 QDQ model ``concat_sinking.py`` has moved the QDQ pair after such a
Concat onto its inputs, so an int8 FC reading the Concat finds no dequantized input and stays
on the CPU (as before this module).
"""
from __future__ import annotations

from math import prod
from typing import List, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def rewrite_concat_views(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every Concat above in place; True when one was (the caller then cleans up and
    sorts the graph)."""
    names, unit_batch = Names(graph), _batch_one(graph)
    changed = False
    for node in list(graph.nodes):
        shapes = _shapes(node)
        if shapes is None:
            continue
        axis = int(attr(node, "axis", 0)) % len(shapes[0])
        outer = prod(shapes[0][:axis])
        if outer == 1 or unit_batch:
            _as_channels(graph, node, shapes, axis, outer, names, done)
        elif axis == 1:
            _as_channels(graph, node, shapes, axis, 0, names, done)
        else:
            continue
        changed = True
    return changed


def _batch_one(graph: gs.Graph) -> bool:
    shapes = [static_shape(t) for t in graph.inputs]
    return all(s is not None and (not s or s[0] == 1) for s in shapes)


def _shapes(node: gs.Node) -> Optional[List[List[int]]]:
    """The static shapes of a float rank-2/3 Concat's inputs on a non-leading axis, or None."""
    if node.op != "Concat" or len(node.outputs) != 1 or not node.inputs \
            or any(is_const(t) for t in node.inputs):
        return None
    tensors = list(node.inputs) + [node.outputs[0]]
    shapes = [static_shape(t) for t in tensors]
    if any(s is None for s in shapes) or len(shapes[0]) not in (2, 3) \
            or any(t.dtype is None or not np.issubdtype(np.dtype(t.dtype), np.floating)
                   for t in tensors):
        return None
    if int(attr(node, "axis", 0)) % len(shapes[0]) == 0:
        return None
    return shapes[:-1]


def _as_channels(graph: gs.Graph, node: gs.Node, shapes: List[List[int]], axis: int,
                 outer: int, names: Names, done: Rewrites) -> None:
    """``outer``: P of the module docstring (1, or over 1 in a batch-1 model), or 0 for the
    form that keeps axis 0 ``[S_0, Q_i, 1, 1]``."""
    out, before = node.outputs[0], len(graph.nodes)
    rows = shapes[0][0] if outer == 0 else 1
    inner = [prod(s[axis:]) for s in shapes]
    total = sum(inner)
    transposed = outer > 1
    for i, (x, q) in enumerate(zip(list(node.inputs), inner)):
        if transposed:
            view = _op(graph, "Reshape", x, [1, outer, 1, q], names, done, node, f"in{i}_view")
            node.inputs[i] = _op(graph, "Transpose", view, [1, q, outer, 1], names, done, node,
                                 f"in{i}_nchw", perm=_TO_NCHW)
        else:
            node.inputs[i] = _op(graph, "Reshape", x, [rows, q, 1, 1], names, done, node,
                                 f"in{i}_view")
    joined_shape = [1, total, outer, 1] if transposed else [rows, total, 1, 1]
    joined = gs.Variable(names.fresh(f"{out.name}_4d"), dtype=out.dtype, shape=joined_shape)
    node.outputs[0] = joined
    node.attrs["axis"] = 1
    if transposed:
        joined = _op(graph, "Transpose", joined, [1, outer, 1, total], names, done, node,
                     "nhwc", perm=_TO_NHWC)
    _op(graph, "Reshape", joined, static_shape(out), names, done, node, "out", into=out)
    _place(graph, node, before, len(inner) * (2 if transposed else 1))
    view = f"[1, Q, {outer}, 1] (NCHW of [{outer}, Q])" if transposed else \
        f"[{rows}, Q, 1, 1]"
    what = (f"Concat on axis {axis} of {len(shapes[0])}-D tensors as the channel Concat of "
            f"their 4-D views {view} (exact)")
    previous = done.rewritten.get(node.name)  # what sinking it said
    done.rewritten[node.name] = f"{previous}; {what}" if previous else what


def _place(graph: gs.Graph, node: gs.Node, first: int, feeding: int) -> None:
    """The nodes added from ``first`` on put around ``node``: the ``feeding`` input views
    before it, the output views after it. The graph stays sorted (graphsurgeon 0.5.2's
    toposort reports a false cycle on a tensor several unsorted nodes read: Concat(x, x))."""
    added = graph.nodes[first:]
    del graph.nodes[first:]
    at = next(i for i, n in enumerate(graph.nodes) if n is node)
    graph.nodes[at:at + 1] = added[:feeding] + [node] + added[feeding:]


def _op(graph: gs.Graph, op: str, x: gs.Tensor, shape: Sequence[int], names: Names,
        done: Rewrites, served: gs.Node, tag: str, perm: Optional[List[int]] = None,
        into: Optional[gs.Tensor] = None) -> gs.Tensor:
    """A Reshape (to ``shape``) or Transpose (by ``perm``) of ``x``, into ``into`` or a new
    tensor."""
    out = into if into is not None else gs.Variable(
        names.fresh(f"{served.name}_{tag}"), dtype=x.dtype, shape=list(shape))
    name = names.fresh(f"{served.name}_{tag}")
    if op == "Reshape":
        target = gs.Constant(names.fresh(f"{name}_shape"), np.array(list(shape), np.int64))
        node = gs.Node("Reshape", name, inputs=[x, target], outputs=[out])
    else:
        node = gs.Node("Transpose", name, attrs={"perm": list(perm)}, inputs=[x], outputs=[out])
    graph.nodes.append(node)
    done.derived[name] = done.derived.get(served.name, served.name)
    return out
