"""A Concat of 2-D or 3-D tensors on a non-leading axis, or of 4-D tensors on H or W, as the
4-D channel Concat of views.

The layer set concatenates 4-D tensors on their channel axis, batch 1. Exporters join a
bidirectional cell's directions on the last axis of its time-major output ``[T, N, h]``
(tf2onnx) and the final states ``[N, h]`` of two cells on their features: 3-D and 2-D Concats
that ``rank_lift.py`` does not take, for two reasons. It lifts regions grown from a seed that
fixes a channel-first layout (a Conv, a pool, a BatchNormalization), and a Concat beside an
unrolled cell's FCs has none; and its view of ``[N, C, L]`` is ``[N, C, 1, L]``, which keeps
axis 0 (here time, over 1) as the batch and puts the last axis on W, not on the channels.

tf2onnx's graphs of NHWC Keras models join 4-D tensors on their last axes (basic-pitch's CQT
stacks real and imaginary parts on axis 3 and the octaves on axis 2, its harmonic stacking on
axis 3), and a lifted 1-D signal ``[N, C, 1, L]`` is joined on its time axis 3: the layer's
Concat takes the channel axis only, but it is the same Concat of views.

Every such Concat (one that ``rank_lift.py`` left: it runs after the lifts) joins each input
``x_i`` of shape ``S_i`` on axis ``a >= 1``. With ``P = prod(S[:a])`` (the same for every input)
and ``Q_i = prod(S_i[a:])``, it is the Concat on axis 1 of the ``[P, Q_i]`` views (row p of the
output is row p of each input, one after another), and that is a channel Concat of 4-D views.
Those rows are ``R`` rows of axis 0 times ``P / R`` rows each: ``R = 1`` when ``P == 1`` or in
a batch-1 model (every graph input's axis 0 is 1, so no tensor's axis 0 is a batch of several
samples and an axis 0 over 1 is data: time, directions); otherwise ``R = S_0``, axis 0 kept (a
batch stays a batch, so a region can still run in chunks: ICLabel's batch of 4). With
``P' = P / R``:

- ``P' == 1``: each input viewed as ``[R, Q_i, 1, 1]``, the Concat on axis 1, the output viewed
  back as ``S``.
- ``P' > 1``: each input viewed as ``[R, P', 1, Q_i]`` and transposed to NCHW
  ``[R, Q_i, P', 1]`` (Transpose ``0, 3, 1, 2``: the NHWC layout the view already holds, a
  relabel that costs nothing), the Concat on axis 1, and back by Transpose ``0, 2, 3, 1`` and a
  Reshape to ``S``.

Any other Concat (axis 0, a constant input, rank 4 on axis 1 (the layer's own), rank 5 or more,
a shape not static, a non-float tensor) is unchanged.

In an int8 QDQ model (every input a per-tensor DequantizeLinear with its zero point written,
and the output read by one such QuantizeLinear alone, or every input on one grid) each view is
followed by a QuantizeLinear -> DequantizeLinear pair of its neighbour's parameters (an input's
DequantizeLinear's; the output's QuantizeLinear's, or the inputs' one grid, the pair then also
after the last view, so what reads the Concat reads a DequantizeLinear: ``concat_sinking.py``
leaves ICLabel's tiling Concats reading their own copies, read by a channel Concat), so every
view is an int8 view (``mrvl.qnn_reshape``, ``mrvl.qnn_layout_transform``) and the Concat the
int8 Concat: a dequantized value moved is still on its grid, and quantizing it with that grid
gives its integer back (``round(fl(q * s) / s) == q`` for ``|q| <= 255``), and dequantizing that
the same float, so the pairs change no value.

Requires: static shapes on the Concats it takes (canonicalize runs it after the rank lifts).
Ensures: exact (Reshape, Transpose and Concat move data only: every output element is the same
input element as before); the Concat keeps its name (``rewritten``), and its output tensor,
which the last view writes now, keeps its name and readers, so the graph's outputs are as
before; the added Reshapes and Transposes are ``derived`` from it.

Not done here: where ``concat_sinking.py`` has moved the QDQ pair after such a Concat onto its
inputs (an int8 FC reading the Concat), the Concat reads no DequantizeLinear: float views, and
the FC finds no dequantized input and stays on the CPU (as before this module).
"""
from __future__ import annotations

from math import prod
from typing import Any, List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, is_const, present, producer, static_shape
from mrvl_convert.core.qdq_grid import grid
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def rewrite_concat_views(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every Concat above in place; True when one was (the caller then cleans up and
    sorts the graph)."""
    names, unit_batch = Names(graph), _batch_one(graph)
    outputs = {t.name for t in graph.outputs}
    changed = False
    for node in list(graph.nodes):
        shapes = _shapes(node)
        if shapes is None:
            continue
        axis = int(attr(node, "axis", 0)) % len(shapes[0])
        outer = prod(shapes[0][:axis])
        # axis 0 kept as the batch (a region can still run in chunks) unless it is one row
        rows = 1 if outer == 1 or unit_batch else shapes[0][0]
        _as_channels(graph, node, shapes, axis, (rows, outer // rows),
                     _Added(graph, names, done, node, _int8_pairs(node, outputs)))
        changed = True
    return changed


def _batch_one(graph: gs.Graph) -> bool:
    shapes = [static_shape(t) for t in graph.inputs]
    return all(s is not None and (not s or s[0] == 1) for s in shapes)


def _shapes(node: gs.Node) -> Optional[List[List[int]]]:
    """The static shapes of a float rank-2/3 Concat's inputs on a non-leading axis, or of a
    rank-4 one's on H or W, or None."""
    if node.op != "Concat" or len(node.outputs) != 1 or not node.inputs \
            or any(is_const(t) for t in node.inputs):
        return None
    tensors = list(node.inputs) + [node.outputs[0]]
    shapes = [static_shape(t) for t in tensors]
    if any(s is None for s in shapes) or len(shapes[0]) not in (2, 3, 4) \
            or any(t.dtype is None or not np.issubdtype(np.dtype(t.dtype), np.floating)
                   for t in tensors):
        return None
    # 4-D on axis 1 is the layer's own Concat; on H or W (tf2onnx's NHWC graphs, a lifted
    # signal's time axis) it is not, and the views make it one.
    if int(attr(node, "axis", 0)) % len(shapes[0]) < (2 if len(shapes[0]) == 4 else 1):
        return None
    return shapes[:-1]


def _int8_pairs(node: gs.Node, outputs: Set[str]) -> Optional[List[gs.Node]]:
    """The per-tensor DequantizeLinear of each input, and last the Q/DQ whose grid the output
    is put on: the one per-tensor QuantizeLinear that alone reads it, else, when every input
    is on one grid (so the output is), the first input's DequantizeLinear (a pair of it is
    added after the last view: ``concat_sinking.py`` leaves such Concats reading a Concat).
    None: the Concat is not an int8 one."""
    dequantized = [producer(t) for t in node.inputs]
    out = node.outputs[0]
    if out.name in outputs or any(d is None or not _explicit(d, "DequantizeLinear")
                                  for d in dequantized):
        return None
    readers = out.outputs
    if len(readers) == 1 and _explicit(readers[0], "QuantizeLinear"):
        return dequantized + [readers[0]]
    if len({grid(d) for d in dequantized}) == 1:
        return dequantized + [dequantized[0]]
    return None


def _explicit(node: gs.Node, op: str) -> bool:
    """A per-tensor ``op`` with its zero point written (its integer type is then the one a
    copied QuantizeLinear writes)."""
    return node.op == op and grid(node) is not None and present(node, 2) is not None


class _Added:
    """The nodes a rewrite of ``served`` adds: named after it, ``derived`` from it, each view
    followed by its int8 pair where ``pairs`` (``_int8_pairs``) holds one."""

    def __init__(self, graph: gs.Graph, names: Names, done: Rewrites, served: gs.Node,
                 pairs: Optional[List[gs.Node]]) -> None:
        self.graph, self.names, self.done, self.served = graph, names, done, served
        self.pairs = pairs

    def op(self, op: str, x: gs.Tensor, shape: Sequence[int], tag: str, pair: int = -1,
           perm: Optional[List[int]] = None, into: Optional[gs.Tensor] = None) -> gs.Tensor:
        """A Reshape (to ``shape``) or Transpose (by ``perm``) of ``x``, then the pair of
        ``pairs[pair]``'s parameters, into ``into`` or a new tensor (no pair before ``into``
        where the Concat's own QuantizeLinear reads it)."""
        closing = into is not None and self.pairs is not None \
            and self.pairs[-1].op == "DequantizeLinear"
        out = into if into is not None and not closing else self._tensor(tag, x.dtype, shape)
        name = self._name(tag)
        if op == "Reshape":
            target = gs.Constant(self.names.fresh(f"{name}_shape"),
                                 np.array(list(shape), np.int64))
            self._add(gs.Node("Reshape", name, inputs=[x, target], outputs=[out]))
        else:
            self._add(gs.Node("Transpose", name, attrs={"perm": list(perm)}, inputs=[x],
                              outputs=[out]))
        if into is not None and not closing:
            return out
        return self.pair(out, pair, tag, into)

    def pair(self, x: gs.Tensor, index: int, tag: str,
             into: Optional[gs.Tensor] = None) -> gs.Tensor:
        """``x`` through a QuantizeLinear -> DequantizeLinear of ``pairs[index]``'s
        parameters, into ``into`` or a new tensor; ``x`` itself in a float model."""
        if self.pairs is None:
            return x
        like = self.pairs[index]
        params = list(like.inputs[1:])
        q = self._tensor(f"{tag}_q", np.dtype(params[1].dtype), x.shape)
        self._add(gs.Node("QuantizeLinear", self._name(f"{tag}_q"), inputs=[x] + params,
                          outputs=[q]))
        dq = into if into is not None else self._tensor(f"{tag}_dq", x.dtype, x.shape)
        self._add(gs.Node("DequantizeLinear", self._name(f"{tag}_dq"), inputs=[q] + params,
                          outputs=[dq]))
        return dq

    def _tensor(self, tag: str, dtype: Any, shape: Sequence[int]) -> gs.Variable:
        return gs.Variable(self.names.fresh(f"{self.served.name}_{tag}"), dtype=dtype,
                           shape=list(shape))

    def _name(self, tag: str) -> str:
        return self.names.fresh(f"{self.served.name}_{tag}")

    def _add(self, node: gs.Node) -> None:
        self.graph.nodes.append(node)
        self.done.derived[node.name] = self.done.derived.get(self.served.name, self.served.name)


def _as_channels(graph: gs.Graph, node: gs.Node, shapes: List[List[int]], axis: int,
                 rows_outer: Tuple[int, int], added: _Added) -> None:
    """``rows_outer``: R and P of the module docstring."""
    out, before = node.outputs[0], len(graph.nodes)
    rows, outer = rows_outer
    inner = [prod(s[axis:]) for s in shapes]
    total = sum(inner)
    transposed = outer > 1
    for i, (x, q) in enumerate(zip(list(node.inputs), inner)):
        if transposed:
            view = added.op("Reshape", x, [rows, outer, 1, q], f"in{i}_view", i)
            node.inputs[i] = added.op("Transpose", view, [rows, q, outer, 1], f"in{i}_nchw", i,
                                      perm=_TO_NCHW)
        else:
            node.inputs[i] = added.op("Reshape", x, [rows, q, 1, 1], f"in{i}_view", i)
    feeding = len(graph.nodes) - before
    joined_shape = [rows, total, outer, 1] if transposed else [rows, total, 1, 1]
    joined = gs.Variable(added.names.fresh(f"{out.name}_4d"), dtype=out.dtype,
                         shape=joined_shape)
    node.outputs[0] = joined
    node.attrs["axis"] = 1
    joined = added.pair(joined, -1, "joined")
    if transposed:
        joined = added.op("Transpose", joined, [rows, outer, 1, total], "nhwc",
                          perm=_TO_NHWC)
    added.op("Reshape", joined, static_shape(out), "out", into=out)
    _place(graph, node, before, feeding)
    view = f"[{rows}, Q, {outer}, 1] (NCHW of [{rows}, {outer}, 1, Q])" if transposed else \
        f"[{rows}, Q, 1, 1]"
    what = (f"Concat on axis {axis} of {len(shapes[0])}-D tensors as the channel Concat of "
            f"their 4-D views {view} (exact{', int8 views' if added.pairs else ''})")
    done = added.done
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
