"""Sequence lift: the frame axis 0 of a batchless tensor as axis 1 of a unit-batch tensor.

madmom's audio nets (and any model exported from per-sample layers) compute on ``[T, F, C]`` or
``[T, C]`` tensors whose axis 0 is time: the frames of one sample, not a batch. Between their
``Squeeze(0)`` and ``Unsqueeze(0)`` Conv wrappers the graph mixes frames (sliding windows cut
by Slices at offsets along axis 0 and stacked, a mean over axis 0) and runs per-frame layers
(Elu, MatMul) on them; the layer set reads axis 0 as the batch and refuses "batch 96", "the
batch dimension is not kept", "it reduces the batch axis 0". Every such tensor ``[T, ...]`` is
computed as ``[1, T, ...]``: the windows become Slices and a Concat along a non-batch axis, a
reduction over frames one over axis 1, and per-frame ops take batch 1.

Requires: static shapes on the tensors it lifts (canonicalize runs it after the shapes that
depended on folded values are known, after ``batchless_lift.py``), opset ``opset``.
Ensures: every region (below) computes on ``[1] + shape`` views of its tensors; a region tensor
read by a node outside it, or a graph output, is written back by a ``Squeeze(0)`` under its own
name, so the graph's outputs keep their names, shapes and values; no lifted tensor has more
than 4 axes.

- Seeds: a ``Squeeze`` of axis 0 only of a ``[1, T, ...]`` tensor (T > 1; its view is the
  Squeeze's input), and a float model input ``[T, ...]`` (T > 1) whose region is closed (no
  reader outside it but graph outputs) and shows that axis 0 is a sequence: it reaches an
  ``Unsqueeze(0)`` (the model puts the frames into one sample itself) or an op that mixes
  frames (``sequence_ops.mixes_frames``). A model input read as a batch stays as it is.
- A region grows from its seeds over readers that are ``sequence_ops.OPS`` with a form here
  (``sequence_ops.liftable``) whose activation inputs are all region tensors, of rank <= 3
  (their views <= 4). A node's outputs join the region; growth goes on from an output whose
  axis 0 is still frames (T > 1, not reduced away). An ``Unsqueeze(0)`` of a region tensor
  (or a constant Reshape to ``[1] + its shape``, onnxruntime's MatMulAddFusion writes one)
  closes it: its readers read the view, which is the Unsqueeze's output. Anything else reading
  a region tensor is outside (a ``Squeeze(0)`` feeds it). A QDQ model's per-tensor
  ``QuantizeLinear`` / ``DequantizeLinear`` are per-frame ops (their int8 outputs grow the region
  too), and a ``DequantizeLinear`` of constants (an int8 weight) counts as a constant operand.
  A Q/DQ is lifted only with all its readers (an int8 layer's pattern stays whole), and a MatMul
  by an int8 weight only onto a 3-D view (the int8 FC's ``[1, T, C]``).
- A stack of frames (``Unsqueeze(a)`` of region tensors, a >= 1, joined by a ``Concat`` along
  a, each Unsqueeze read by that Concat only: the sliding windows) is first made a ``Concat``
  along a of the pieces and a ``Reshape`` to the stacked shape (into the Reshape that reads it
  when there is one): the same elements in the same memory order, one axis fewer, so a window
  stack of 3-D frames fits the 4-D views.

Exact: each lifted op computes the same elements from the same elements (ONNX broadcasts from
the last axis, so constants of the original rank align as before; a Slice, Pad, Concat, Split,
Softmax, reduction, Squeeze or Unsqueeze names the same axis one place right; a Reshape's
target gains the leading 1); ``Squeeze``/``Unsqueeze``/``Reshape`` copy. One bound: a
reduction or a MatMul over the longer shape may be added by onnxruntime in another order; two
float32 sums of the same n terms are at most ``2 (n - 1) u sum |x|`` apart (u = 2**-24), a mean
``2 (n - 1) u mean |x|``. The tests compare onnxruntime's outputs before and after
(``tests/frontend/test_sequence_lift.py``).

Then ``sequence_forms.py`` moves a lifted Pad after the Unsqueeze / Transpose reading it (so a
Conv folds it) and makes a mean over the frames and bins of ``[1, T, W, C]`` a global average
pool (its bound is there).

Bookkeeping (``done``): a lifted node keeps its name and is listed in ``rewritten``; an added
Unsqueeze or Squeeze is in ``derived`` with the node it serves; a model Squeeze(0),
Unsqueeze(0) or stacking Unsqueeze that goes is in ``merged`` with the node computing it now.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.cleanup import cleanup
from mrvl_convert.core.graph import is_const, static_shape
from mrvl_convert.core.toposort import toposort
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, axes_node
from mrvl_convert.frontend.sequence_forms import means_as_pools, sink_pads
from mrvl_convert.frontend.sequence_ops import (OPS, flattens_features, keeps_frames, kept_names,
                                                liftable, lift, mixes_frames, squeezed_axes,
                                                unsqueezed_axes)

_QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))  # a QuantizeLinear's frames (QDQ models)
_WHAT = "computes on [1, T, ...]: the frame axis 0 of a batchless tensor as axis 1 of one sample"


@dataclass
class _Region:
    tensors: Dict[str, gs.Tensor] = field(default_factory=dict)  # original tensors, by name
    lifted: List[gs.Node] = field(default_factory=list)
    closing: List[gs.Node] = field(default_factory=list)  # Unsqueeze(0) readers
    outside: bool = False   # a tensor of frames is read by a node that is not lifted
    sequence: bool = False  # the graph treats axis 0 as a sequence (see the module docstring)


def lift_sequences(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Lift every region of ``graph`` in place, recording it in ``done``; True when one was
    lifted (the caller then cleans up and sorts the graph)."""
    squeezes = [n for n in graph.nodes if _is_seed_squeeze(n)]
    inputs = [t for t in graph.inputs if not is_const(t) and _frames(t)
              and _is_sequence(_grow(graph, [t], opset, 4))]
    seeds = [n.outputs[0] for n in squeezes] + inputs
    if not seeds:
        return False
    names = Names(graph)
    if _stacks_as_concats(graph, _grow(graph, seeds, opset, 4), opset, names, done):
        toposort(cleanup(graph))
    region = _grow(graph, seeds, opset, 3)
    if not region.lifted and not region.closing:
        return False
    _apply(graph, region, squeezes, opset, names, done)
    return True


def _is_sequence(region: _Region) -> bool:
    return region.sequence and not region.outside


def _frames(tensor: gs.Tensor, max_rank: int = 3) -> bool:
    """A float tensor ``[T, ...]`` of rank 1 to ``max_rank`` with T > 1."""
    shape = static_shape(tensor)
    return bool(shape) and len(shape) <= max_rank and shape[0] > 1 and tensor.dtype is not None \
        and (np.issubdtype(np.dtype(tensor.dtype), np.floating)
             or np.dtype(tensor.dtype) in _QUANTIZED)


def _is_seed_squeeze(node: gs.Node) -> bool:
    return node.op == "Squeeze" and bool(node.outputs) and _frames(node.outputs[0]) \
        and squeezed_axes(node) == [0]


def _closes(node: gs.Node, outputs: Set[str]) -> bool:
    return _opens_sample(node) and node.outputs[0].name not in outputs


def _opens_sample(node: gs.Node) -> bool:
    """An ``Unsqueeze(0)``, or a Reshape to ``[1] + shape`` (onnxruntime's MatMulAddFusion
    writes a head's ``[T, O] -> [1, T, O]`` so): its output is the lifted view itself."""
    if node.op == "Unsqueeze":
        return unsqueezed_axes(node) == [0]
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0]) if node.outputs \
        else None
    return node.op == "Reshape" and is_const(node.inputs[1]) and bool(src) \
        and dst == [1] + list(src)


def _fits(node: gs.Node, opset: int, max_rank: int) -> bool:
    if node.op not in OPS or not liftable(node, opset) or _int8_matmul_over_4d(node):
        return False
    if node.op in ("QuantizeLinear", "DequantizeLinear") and not all(
            _fits(r, opset, max_rank) or _opens_sample(r) for r in node.outputs[0].outputs):
        return False  # a Squeeze between a Q/DQ pair or a DQ and its op breaks the int8 form
    acts = [t for t in list(node.inputs) + list(node.outputs) if t.name and not _fixed(t)]
    shapes = [static_shape(t) for t in acts]
    return all(s is not None and len(s) <= max_rank for s in shapes)


def _fixed(tensor: gs.Tensor) -> bool:
    """A constant, or a DequantizeLinear of constants (a QDQ model's int8 weight): an operand
    a lifted node keeps as it is."""
    maker = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    return is_const(tensor) or (maker is not None and maker.op == "DequantizeLinear"
                                and all(is_const(t) for t in maker.inputs if t.name))


def _int8_matmul_over_4d(node: gs.Node) -> bool:
    """A MatMul by a dequantized int8 weight whose lifted input would be 4-D: the int8 FC takes
    ``[1, T, C]`` at most, and the float BatchMatmul it would fall to leaves the weight's
    DequantizeLinear on CPU, worse than the head at batch T (it stays unlifted)."""
    weight = node.inputs[1] if node.op == "MatMul" and len(node.inputs) > 1 else None
    return weight is not None and not is_const(weight) and _fixed(weight) \
        and len(static_shape(node.inputs[0]) or []) > 2


def _grow(graph: gs.Graph, seeds: List[gs.Tensor], opset: int, max_rank: int) -> _Region:
    """The region around ``seeds`` whose original tensors have at most ``max_rank`` axes. A
    node reading two region tensors (a residual Add) waits until both are in."""
    outputs = kept_names(graph)
    region, frontier, waiting = _Region(), list(seeds), set()
    region.tensors.update((t.name, t) for t in seeds)
    seen: Set[int] = set()
    while frontier:
        tensor = frontier.pop()
        for reader in tensor.outputs:
            if id(reader) in seen:
                continue
            if _closes(reader, outputs):
                seen.add(id(reader))
                region.closing.append(reader)
                region.sequence = True
                continue
            acts = [t for t in reader.inputs if t.name and not _fixed(t)]
            if any(t.name not in region.tensors for t in acts):
                waiting.add(id(reader))
                continue
            seen.add(id(reader))
            if not _fits(reader, opset, max_rank):
                region.outside = True
                continue
            region.lifted.append(reader)
            region.sequence |= mixes_frames(reader)
            for out in (t for t in reader.outputs if t.name):  # not an absent optional one
                region.tensors[out.name] = out
                if keeps_frames(reader) and _frames(out, max_rank):
                    frontier.append(out)
    region.outside |= bool(waiting - seen)
    return region


def _stacks_as_concats(graph: gs.Graph, region: _Region, opset: int, names: Names,
                       done: Rewrites) -> bool:
    """Each stack of frames in ``region`` as a Concat along its axis and a Reshape."""
    outputs = kept_names(graph)
    changed = False
    for concat in [n for n in region.lifted if n.op == "Concat"]:
        pieces = _stack_pieces(concat, region, outputs)
        if pieces is None:
            continue
        stacked = concat.outputs[0]
        joined_shape = static_shape(pieces[0].inputs[0])
        axis = unsqueezed_axes(pieces[0])[0]
        joined_shape[axis] *= len(pieces)
        joined = gs.Variable(names.fresh(f"{stacked.name}_joined"), dtype=stacked.dtype,
                             shape=joined_shape)
        concat.inputs.clear()
        concat.inputs.extend([p.inputs[0] for p in pieces])
        concat.outputs[0] = joined
        for piece in pieces:
            piece.inputs.clear()
            piece.outputs.clear()
            done.merged[piece.name] = concat.name
        _reshape_to(graph, joined, stacked, opset, names, done, concat, outputs)
        done.rewritten[concat.name] = (f"a stack of {len(pieces)} frame windows as a Concat "
                                       f"along axis {axis} and a Reshape")
        changed = True
    return changed


def _stack_pieces(concat: gs.Node, region: _Region, outputs: Set[str]
                  ) -> Optional[List[gs.Node]]:
    """The Unsqueeze(a) nodes a stacking Concat along a (a >= 1) joins, or None."""
    rank = len(static_shape(concat.outputs[0]) or [])
    axis = int(concat.attrs.get("axis", 0)) % rank if rank else -1
    pieces = [t.inputs[0] if len(t.inputs) == 1 else None for t in concat.inputs]
    if axis < 1 or any(p is None or p.op != "Unsqueeze" or unsqueezed_axes(p) != [axis]
                       or len(p.outputs[0].outputs) != 1 or p.outputs[0].name in outputs
                       or p.inputs[0].name not in region.tensors for p in pieces):
        return None
    shapes = {tuple(static_shape(p.inputs[0]) or ()) for p in pieces}
    return pieces if len(shapes) == 1 and axis < rank - 1 else None


def _reshape_to(graph: gs.Graph, joined: gs.Tensor, stacked: gs.Tensor, opset: int,
                names: Names, done: Rewrites, concat: gs.Node, outputs: Set[str]) -> None:
    """``stacked`` is the Reshape of ``joined``: a Reshape reading it reads ``joined`` (one
    Reshape of another is the last one), else one is added."""
    readers = list(stacked.outputs)
    if stacked.name not in outputs and readers and all(
            _reshapes_whole(r) or flattens_features(r) for r in readers):
        for reader in readers:
            reader.inputs[0] = joined
        return
    name = names.fresh(f"{concat.name}_stacked")
    shape = gs.Constant(names.fresh(f"{name}_shape"),
                        np.array(static_shape(stacked), np.int64))
    graph.nodes.append(gs.Node("Reshape", name, inputs=[joined, shape], outputs=[stacked]))
    done.derived[name] = concat.name


def _reshapes_whole(node: gs.Node) -> bool:
    """A Reshape to a constant shape that copies no input axis but the first (a 0 there
    names the input's own size, which the joined tensor keeps only on axis 0)."""
    if node.op != "Reshape" or not is_const(node.inputs[1]):
        return False
    return not np.any(np.asarray(node.inputs[1].values).reshape(-1)[1:] == 0)


def _apply(graph: gs.Graph, region: _Region, squeezes: List[gs.Node], opset: int,
           names: Names, done: Rewrites) -> None:
    seeded = {n.outputs[0].name: n for n in squeezes}
    inputs = {t.name for t in graph.inputs}
    views: Dict[str, gs.Tensor] = {}
    for name, tensor in region.tensors.items():
        if name in seeded:
            views[name] = seeded[name].inputs[0]
        else:
            views[name] = gs.Variable(names.fresh(f"{name}_seq"), dtype=tensor.dtype,
                                      shape=[1] + static_shape(tensor))
    for node in region.lifted:
        lift(node, opset, names)
        for i, tensor in enumerate(node.inputs):
            if tensor.name in views and not is_const(tensor):
                node.inputs[i] = views[tensor.name]
        for i, tensor in enumerate(node.outputs):
            if tensor.name:
                node.outputs[i] = views[tensor.name]
        _record(done, node.name)
    for node in region.closing:
        _close(node, views[node.inputs[0].name], done)
    outputs = kept_names(graph)
    for name, tensor in region.tensors.items():
        served = region.lifted[0] if region.lifted else region.closing[0]
        if name in inputs:
            if views[name].outputs:  # read by a lifted node, or by a closing Unsqueeze's readers
                _add(graph, "Unsqueeze", tensor, views[name], opset, names, done, served)
        elif name in seeded:
            _drop_seed(seeded[name], served, outputs, done)
        elif tensor.outputs or name in outputs:
            _add(graph, "Squeeze", views[name], tensor, opset, names, done,
                 views[name].inputs[0])
    sink_pads(graph, [n for n in region.lifted if n.op == "Pad"], names, done)
    means_as_pools(graph, [n for n in region.lifted if n.op == "ReduceMean"], opset, names,
                   done)


def _record(done: Rewrites, name: str) -> None:
    previous = done.rewritten.get(name)
    done.rewritten[name] = f"{previous}; {_WHAT}" if previous else _WHAT


def _close(node: gs.Node, view: gs.Tensor, done: Rewrites) -> None:
    """The Unsqueeze(0)'s readers read the view, which is its output."""
    out = node.outputs[0]
    readers = list(out.outputs)
    for reader in readers:
        for i, tensor in enumerate(reader.inputs):
            if tensor is out:
                reader.inputs[i] = view
    producer = view.inputs[0].name if view.inputs else (readers[0].name if readers else None)
    done.derived.pop(node.name, None)
    if producer is not None:  # an added node too: what was merged into it follows
        done.merged[node.name] = producer
    node.inputs.clear()
    node.outputs.clear()


def _drop_seed(squeeze: gs.Node, served: gs.Node, outputs: Set[str], done: Rewrites) -> None:
    """A seed Squeeze(0) nobody reads any more goes into the region's node reading its input."""
    out = squeeze.outputs[0]
    if out.outputs or out.name in outputs:
        return
    view = squeeze.inputs[0]
    reader = next((r for r in view.outputs if r is not squeeze), served)
    done.derived.pop(squeeze.name, None)
    done.merged[squeeze.name] = reader.name  # an added one too: merges into it follow
    squeeze.inputs.clear()
    squeeze.outputs.clear()


def _add(graph: gs.Graph, op: str, x: gs.Tensor, out: gs.Tensor, opset: int, names: Names,
         done: Rewrites, served: gs.Node) -> None:
    name = names.fresh(f"{served.name}_{op.lower()}_seq")
    graph.nodes.append(axes_node(op, name, x, out, [0], opset, names))
    done.derived[name] = done.derived.get(served.name, served.name)
