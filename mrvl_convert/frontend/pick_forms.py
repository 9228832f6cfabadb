"""Picks: a Gather of constant indices on a float tensor as a Slice, and a pick of a Concat's
output that falls within one of its inputs read from that input.

Exporters pick rows out of a recurrent cell's states this way: PyTorch concatenates the final
states ``Y_h`` ``[2, N, h]`` of two bidirectional GRUs on axis 0 and takes rows -2 and -1 with
``Gather(axis 0, scalar index)``; tf2onnx slices a cell's ``Y`` per direction and per step. No
layer is a Gather, and the Concat on the leading axis is no channel Concat: both stayed on the
CPU and cut the model. A Slice is a StridedSlice layer, and the Concat folds away.

Requires: static shapes on the tensors it rewrites, opset ``opset`` >= 10 (Slice reads its
starts, ends and axes as inputs).
Ensures (exact: data movement only, every output element is the same input element as before):

- A ``Gather`` of a float tensor that is not a constant, by constant indices that are a scalar
  or a 1-D run of consecutive ascending positions (negative ones normalised, all in range), is
  the ``Slice`` of that run on its axis; a scalar index adds a ``Squeeze`` of the axis (Gather
  drops it). Any other Gather (indices computed at run time, a token id's lookup, several
  positions not in a run) is unchanged.
- A ``Slice`` with constant starts, ends (steps 1 on the axis) of a Concat's output whose range
  on the Concat's axis lies within one input reads that input, its start and end shifted by
  the input's offset (a Slice of a whole input stays: a later pass may merge its reader away,
  and a node merged into one that goes would have nowhere to be). The Concat goes when nothing
  else reads it (the caller cleans up).

Bookkeeping (``done``): a rewritten Gather or Slice keeps its name (``rewritten``); an added
Squeeze is ``derived`` from its Gather.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, present, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, axes_node


def rewrite_picks(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite every Gather and Slice above in place; True when one was (the caller then
    cleans up and sorts the graph)."""
    if opset < 10:
        return False
    names, changed = Names(graph), False
    for node in list(graph.nodes):
        if node.op == "Gather" and _gather_run(node) is not None:
            _gather_as_slice(graph, node, opset, names, done)
            changed = True
    for node in list(graph.nodes):
        if node.op == "Slice" and node.outputs:
            changed = _slice_of_concat(node, names, done) or changed
    return changed


def _is_float(tensor: gs.Tensor) -> bool:
    return tensor.dtype is not None and np.issubdtype(np.dtype(tensor.dtype), np.floating)


def _gather_run(node: gs.Node) -> Optional[Tuple[int, int, int, bool]]:
    """(axis, start, end, scalar) of a Gather that picks one run of positions, or None."""
    data, indices = node.inputs[0], node.inputs[1]
    shape = static_shape(data)
    if is_const(data) or not _is_float(data) or not is_const(indices) or shape is None \
            or static_shape(node.outputs[0]) is None:
        return None
    axis = int(attr(node, "axis", 0)) % len(shape)
    values = const_value(indices)
    if values.ndim > 1 or values.size == 0:
        return None
    picks = [int(v) + shape[axis] if int(v) < 0 else int(v) for v in values.reshape(-1)]
    if not all(0 <= p < shape[axis] for p in picks) \
            or picks != list(range(picks[0], picks[0] + len(picks))):
        return None
    return axis, picks[0], picks[-1] + 1, values.ndim == 0


def _ints(names: Names, base: str, values: List[int]) -> gs.Constant:
    return gs.Constant(names.fresh(base), np.array(values, np.int64))


def _gather_as_slice(graph: gs.Graph, node: gs.Node, opset: int, names: Names,
                     done: Rewrites) -> None:
    axis, start, end, scalar = _gather_run(node)
    data, out = node.inputs[0], node.outputs[0]
    node.op, node.attrs = "Slice", {}
    node.inputs.clear()
    node.inputs.extend([data, _ints(names, f"{node.name}_starts", [start]),
                        _ints(names, f"{node.name}_ends", [end]),
                        _ints(names, f"{node.name}_axes", [axis])])
    what = f"a Slice [{start}:{end}] of axis {axis}"
    if scalar:  # Gather drops the axis a scalar index picks; the Slice keeps it (size 1)
        kept = list(static_shape(out))
        kept.insert(axis, 1)
        sliced = gs.Variable(names.fresh(f"{out.name}_slice"), dtype=out.dtype, shape=kept)
        node.outputs[0] = sliced
        squeeze = names.fresh(f"{node.name}_squeeze")
        at = next(i for i, n in enumerate(graph.nodes) if n is node)  # the graph stays sorted
        graph.nodes.insert(at + 1, axes_node("Squeeze", squeeze, sliced, out, [axis], opset,
                                             names))
        done.derived[squeeze] = node.name
        what += " and a Squeeze of it"
    done.rewritten[node.name] = f"Gather of constant indices as {what} (exact)"


def _concat_range(node: gs.Node) -> Optional[Tuple[gs.Node, int, int, int, int]]:
    """(the Concat, the Slice's position of the Concat's axis in its axes, the axis, start,
    end) when the Slice reads a Concat and its range on that axis is constant with step 1."""
    concat = node.inputs[0].inputs[0] if node.inputs[0].inputs else None
    shape = static_shape(node.inputs[0])
    given = [present(node, i) for i in range(1, 5)]
    if concat is None or concat.op != "Concat" or shape is None \
            or not all(t is None or is_const(t) for t in given) or given[0] is None \
            or given[1] is None:
        return None
    starts, ends = (const_value(t).reshape(-1) for t in given[:2])
    axes = list(range(len(starts))) if given[2] is None else \
        [int(a) % len(shape) for a in const_value(given[2]).reshape(-1)]
    steps = [1] * len(starts) if given[3] is None else const_value(given[3]).reshape(-1)
    axis = int(attr(concat, "axis", 0)) % len(shape)
    if axis not in axes or int(steps[axes.index(axis)]) != 1:
        return None
    k = axes.index(axis)
    start, end = (_clamped(int(v), shape[axis]) for v in (starts[k], ends[k]))
    return concat, k, axis, start, end


def _clamped(value: int, size: int) -> int:
    """A step-1 Slice bound as ONNX normalises it: negative from the end, clamped to [0, size]."""
    return min(max(value + size if value < 0 else value, 0), size)


def _slice_of_concat(node: gs.Node, names: Names, done: Rewrites) -> bool:
    found = _concat_range(node)
    if found is None:
        return False
    concat, k, axis, start, end = found
    offset = 0
    for piece in concat.inputs:
        size = static_shape(piece)[axis] if static_shape(piece) else None
        if size is None:
            return False
        if offset <= start and end <= offset + size and start < end:
            return _read_piece(node, piece, k, start - offset, end - offset, names, done)
        offset += size
    return False


def _read_piece(node: gs.Node, piece: gs.Tensor, k: int, start: int, end: int,
                names: Names, done: Rewrites) -> bool:
    for index, value in ((1, start), (2, end)):
        bounds = const_value(node.inputs[index]).reshape(-1).astype(np.int64).copy()
        bounds[k] = value
        node.inputs[index] = _ints(names, f"{node.name}_{'starts' if index == 1 else 'ends'}",
                                   list(bounds))
    node.inputs[0] = piece
    what = f"reads the Concat's input {piece.name} directly (its range lies within it)"
    previous = done.rewritten.get(node.name)
    done.rewritten[node.name] = f"{previous}; {what}" if previous else what
    return True
