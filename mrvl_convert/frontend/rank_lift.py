"""Rank lifting: 1-D signal networks, and 2-D feature vectors, computed as their 4-D forms.

The layer set is 2-D (NHWC): a Conv1d, BatchNorm1d, MaxPool1d, AvgPool1d, a Concat of 1-D
signals or a LayerNorm's ReduceMean over a ``[N, C]`` vector has no layer of its own rank. Each
is the same op on a 4-D view with unit spatial axes: ``[N, C, L]`` as ``[N, C, 1, L]`` (Conv1d
is Conv2d with a 1 x K kernel), ``[N, C]`` as ``[N, C, 1, 1]``. The NHWC form of either view
is the tensor's own memory with the channels last.

Requires: a graph whose activations' shapes are static (canonicalize runs this after the
shapes that depended on folded values are known), opset ``opset``.
Ensures: every region found below computes on its 4-D view; the graph's outputs, and every
tensor read outside a region, keep their names, shapes and values.

- A region is a connected set of nodes whose activation inputs and outputs are all float
  tensors of one rank r (3, or 2) with static shapes, each node one of ``rank_ops.OPS`` with
  constant geometry (``rank_ops.liftable``), grown from a seed that fixes the layout as
  channel-first: for r = 3 a Conv, ConvTranspose, BatchNormalization or pool (ONNX defines
  them with the channel at axis 1 and the signal after it); for r = 2 a BatchNormalization or
  a ReduceMean over axis 1 of ``[N, C]``, the only axis a vector's features have; for either,
  a node beside a Squeeze or Unsqueeze of the unit axes (the model's own view, or one a
  region lifted before wrote). A transformer's token tensor ``[B, T, C]`` between MatMuls and
  LayerNorms holds no seed, so it is never lifted: its layers take 3-D tensors as they lie.
- Each tensor of a region is replaced by its 4-D view: a region node writes the view directly,
  a tensor entering the region (from outside, or a model input) gets one ``Unsqueeze`` of the
  unit axes, and a region tensor read outside it (or a model output) one ``Squeeze`` back to
  the original tensor, which keeps its name. The nodes' attributes and constant inputs are
  rewritten by ``rank_ops.lift``.
- An int8 QDQ model's regions hold its per-tensor Q/DQ pairs; its weights' DequantizeLinear
  constants take the view with them (``rank_ops``).
- A LayerNormalization of a ``[N, C]`` vector over C computes on ``[N, 1, C]``, one token
  (Unsqueeze(1) before, Squeeze(1) after): the layer chain takes it over the last axis of a
  3-D tensor.
- Then a ``Squeeze`` whose output an ``Unsqueeze`` of the same axes reads, restoring the same
  shape, cancels: the Unsqueeze's readers read the Squeeze's input (the model's own
  ``Squeeze(2) -> Conv1d`` or ``Conv1d -> Unsqueeze(2) -> Conv2d`` become one region).

Exact: each lifted op computes the same elements from the same elements on its view (a kernel,
pad or stride of 1 / 0 on a unit axis selects the one position); onnxruntime's Conv runs a 1-D
convolution as the 2-D one with H = 1, so the tests compare the outputs bit for bit
(``tests/frontend/test_rank_lift.py``). Unsqueeze and Squeeze copy. One bound: a reduction
over C of a ``[N, C]`` vector (a LayerNorm's mean) reduces a non-last axis of ``[N, C, 1, 1]``,
which onnxruntime may add in another order; two float32 sums of the same n terms are at most
``2 (n - 1) u sum |x|`` apart (u = 2**-24), a mean ``2 (n - 1) u mean |x|``. A rank-3
reduction over L stays one over the last axis.

Bookkeeping (``done``): a lifted node keeps its name and is listed in ``rewritten``; the added
Unsqueeze and Squeeze nodes are in ``derived`` with the (loaded) node they serve; a model
Unsqueeze or Squeeze that cancels is in ``merged`` with the reader that now reads its input.
"""
from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (const_value, is_const, outer_inputs, present,
                                     static_shape)
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, axes_node
from mrvl_convert.frontend.rank_ops import (GLOBAL, QDQ, REDUCE, WINDOWED, dequantized, lift,
                                            liftable, lifted_shape, unit_axes)

_SEEDS = {3: WINDOWED | GLOBAL | {"BatchNormalization"}, 2: {"BatchNormalization"}}


def lift_ranks(graph: gs.Graph, opset: int, done: Rewrites,
               ranks: Sequence[int] = (2, 3)) -> bool:
    """Lift every region of ``graph`` of one of ``ranks`` in place, recording it in ``done``;
    True when one was lifted (the caller then cleans up and sorts the graph)."""
    names, claimed = Names(graph), set()
    regions = []
    for node in list(graph.nodes):
        rank = _node_rank(node)
        if rank in ranks and id(node) not in claimed and _is_seed(node, rank) \
                and liftable(node, rank, opset):
            regions.append((rank, _grow(node, rank, opset, claimed)))
    # A model output, or a tensor an If/Loop body reads (unlisted in its readers), keeps its
    # producer: the Squeeze back writes it.
    kept = {t.name for t in graph.outputs} | {
        t.name for n in graph.nodes for t in outer_inputs(n)} if regions else set()
    for rank, region in regions:
        _lift_region(graph, region, rank, opset, names, done, kept)
    norms = [n for n in graph.nodes if 2 in ranks and _vector_layer_norm(graph, n)]
    for node in norms:
        _layer_norm_as_tokens(graph, node, opset, names, done)
    if regions or norms:
        _cancel_pairs(graph, done)
    return bool(regions or norms)


def _vector_layer_norm(graph: gs.Graph, node: gs.Node) -> bool:
    """A LayerNormalization of a float [N, C] over C whose mean and deviation are unused."""
    if node.op != "LayerNormalization" or not node.outputs \
            or _node_rank(node) != 2 and len(static_shape(node.inputs[0]) or ()) != 2:
        return False
    outputs = {id(t) for t in graph.outputs}
    return int(node.attrs.get("axis", -1)) % 2 == 1 and not any(
        t.outputs or id(t) in outputs for t in node.outputs[1:])


def _layer_norm_as_tokens(graph: gs.Graph, node: gs.Node, opset: int, names: Names,
                          done: Rewrites) -> None:
    """[N, C] -> Unsqueeze(1) -> the same LayerNormalization of [N, 1, C] (one token, over
    its last axis as before: exact) -> Squeeze(1)."""
    x, out = node.inputs[0], node.outputs[0]
    n, c = static_shape(x)
    tokens = gs.Variable(names.fresh(f"{x.name}_tokens"), dtype=x.dtype, shape=[n, 1, c])
    normed = gs.Variable(names.fresh(f"{out.name}_tokens"), dtype=out.dtype, shape=[n, 1, c])
    node.inputs[0] = tokens
    while len(node.outputs) > 1:  # the unused mean and deviation
        node.outputs.pop()
    node.outputs[0] = normed
    _add(graph, "Unsqueeze", x, tokens, [1], opset, names, done, node)
    _add(graph, "Squeeze", normed, out, [1], opset, names, done, node)
    _record(done, node.name, "LayerNormalization of a 2-D [N, C] computes on its 3-D view "
                             "[N, 1, C] (one token)")


def _activations(node: gs.Node) -> List[gs.Tensor]:
    """What the node reads and writes but constants and dequantized constants (an int8
    model's weights, biases and operands: rank_ops reshapes those)."""
    inputs = [t for t in node.inputs if t.name and not is_const(t)]
    if node.op in ("Conv", "ConvTranspose"):
        inputs = inputs[:1]
    elif node.op != "DequantizeLinear":
        inputs = [t for t in inputs if dequantized(t) is None]
    return inputs + list(node.outputs)


def _node_rank(node: gs.Node) -> Optional[int]:
    """The one rank (2 or 3) of every activation the node reads and writes, all float."""
    ranks = set()
    for tensor in _activations(node):
        shape = static_shape(tensor)
        if shape is None or tensor.dtype is None:
            return None
        floating, int8 = _kind(tensor.dtype)
        if not (floating or int8 and node.op in QDQ):
            return None
        ranks.add(len(shape))
    return ranks.pop() if len(ranks) == 1 and ranks <= {2, 3} else None


@functools.lru_cache(maxsize=64)
def _kind(dtype: object) -> Tuple[bool, bool]:
    """(floating, int8 or uint8) of a tensor's dtype: asked for every activation of every node,
    twice a conversion (numpy's dtype tests were most of the rank scan's cost)."""
    kind = np.dtype(dtype)
    return bool(np.issubdtype(kind, np.floating)), kind in (np.int8, np.uint8)


def _is_seed(node: gs.Node, rank: int) -> bool:
    if node.op in _SEEDS[rank] or _beside_view(node, rank):
        return True
    if rank == 2 and node.op in REDUCE:  # a LayerNorm's mean over a vector's features
        axes = _axes_of(node)
        return axes is not None and sorted(a % 2 for a in axes) == [1]
    return False


def _beside_view(node: gs.Node, rank: int) -> bool:
    """A tensor of the node comes from, or goes to, the 4-D view itself: a Squeeze of the
    unit axes wrote it, or an Unsqueeze of them reads it (a Conv1d written by hand as
    Unsqueeze, Conv2d, Squeeze; or a region lifted before)."""
    for tensor in _activations(node):
        for other in list(tensor.inputs) + list(tensor.outputs):
            if other.op in ("Squeeze", "Unsqueeze") and _unit_axes_of(other) == unit_axes(rank):
                return True
    return False


def _axes_of(node: gs.Node) -> Optional[List[int]]:
    if "axes" in node.attrs:
        return [int(a) for a in node.attrs["axes"]]
    tensor = present(node, 1)
    return [int(a) for a in const_value(tensor).reshape(-1)] \
        if tensor is not None and is_const(tensor) else None


def _grow(seed: gs.Node, rank: int, opset: int, claimed: Set[int]) -> List[gs.Node]:
    """The connected liftable nodes of ``rank`` around ``seed`` (breadth first)."""
    region, queue = [seed], [seed]
    claimed.add(id(seed))
    while queue:
        node = queue.pop(0)
        for tensor in _activations(node):
            for other in list(tensor.inputs) + list(tensor.outputs):
                if id(other) not in claimed and _node_rank(other) == rank \
                        and liftable(other, rank, opset) and not _fc_pair(other, rank, opset):
                    claimed.add(id(other))
                    region.append(other)
                    queue.append(other)
    return region


def _fc_pair(node: gs.Node, rank: int, opset: int) -> bool:
    """The QuantizeLinear of a MatMul or Gemm that stays unlifted (an int8 FC on ``[1, T, C]``
    tokens), or a DequantizeLinear of it: lifted without the FC, its view's Unsqueeze would
    part the int8 layer from its output pair (the int8 tensor read through an fp16 op)."""
    if node.op == "DequantizeLinear":
        node = node.inputs[0].inputs[0] if node.inputs[0].inputs else node
    maker = node.inputs[0].inputs[0] if node.op == "QuantizeLinear" and node.inputs[0].inputs \
        else None
    return maker is not None and maker.op in ("MatMul", "Gemm") \
        and not (_node_rank(maker) == rank and liftable(maker, rank, opset))


def _lift_region(graph: gs.Graph, region: List[gs.Node], rank: int, opset: int, names: Names,
                 done: Rewrites, kept: Set[str]) -> None:
    inside = {id(n) for n in region}
    tensors: Dict[int, gs.Tensor] = {}  # all of them first: replacing changes the inputs
    for node in region:
        tensors.update((id(t), t) for t in _activations(node))
    for tensor in tensors.values():
        _replace(graph, tensor, inside, tensor.name in kept, rank, opset, names, done)
    for node in region:
        lift(node, rank, opset, names)
        view = "[N, C, 1, L]" if rank == 3 else "[N, C, 1, 1]"
        _record(done, node.name, f"computes on the 4-D view {view} of its {rank}-D tensors")


def _record(done: Rewrites, name: str, what: str) -> None:
    """Said after what an earlier rewrite of the node said (a fold, a Sub as Add)."""
    previous = done.rewritten.get(name)
    done.rewritten[name] = f"{previous}; {what}" if previous else what


def _replace(graph: gs.Graph, tensor: gs.Tensor, inside: Set[int], is_output: bool, rank: int,
             opset: int, names: Names, done: Rewrites) -> None:
    """Give the region ``tensor``'s 4-D view; outside readers keep ``tensor`` itself."""
    view = gs.Variable(names.fresh(f"{tensor.name}_4d"), dtype=tensor.dtype,
                       shape=lifted_shape(static_shape(tensor), rank))
    producer = tensor.inputs[0] if tensor.inputs else None
    readers = [r for r in tensor.outputs if id(r) in inside]
    outside = [r for r in tensor.outputs if id(r) not in inside]
    for reader in readers:
        for i, t in enumerate(reader.inputs):
            if t is tensor:
                reader.inputs[i] = view
    if producer is not None and id(producer) in inside:
        producer.outputs[producer.outputs.index(tensor)] = view
        if outside or is_output:
            _add(graph, "Squeeze", view, tensor, unit_axes(rank), opset, names, done,
                 producer)
    else:
        _add(graph, "Unsqueeze", tensor, view, unit_axes(rank), opset, names, done, readers[0])


def _add(graph: gs.Graph, op: str, x: gs.Tensor, out: gs.Tensor, axes: List[int], opset: int,
         names: Names, done: Rewrites, served: gs.Node) -> None:
    name = names.fresh(f"{served.name}_{op.lower()}")
    graph.nodes.append(axes_node(op, name, x, out, axes, opset, names))
    done.derived[name] = done.derived.get(served.name, served.name)


def _unit_axes_of(node: gs.Node) -> Optional[List[int]]:
    """A Squeeze's or Unsqueeze's axes, normalised on the 4-D side, or None."""
    four = node.inputs[0] if node.op == "Squeeze" else node.outputs[0]
    shape, axes = static_shape(four), _axes_of(node)
    if shape is None or axes is None:
        return None
    return sorted(a % len(shape) for a in axes)


def _cancel_pairs(graph: gs.Graph, done: Rewrites) -> None:
    outputs = {id(t) for t in graph.outputs}
    for node in list(graph.nodes):
        if node.op != "Unsqueeze" or not node.outputs or not node.inputs[0].inputs:
            continue
        squeeze, y = node.inputs[0].inputs[0], node.outputs[0]
        if squeeze.op != "Squeeze" or id(y) in outputs or not y.outputs \
                or static_shape(squeeze.inputs[0]) != static_shape(y) \
                or _unit_axes_of(node) is None \
                or _unit_axes_of(node) != _unit_axes_of(squeeze):
            continue
        source, readers = squeeze.inputs[0], list(y.outputs)
        for reader in readers:
            for i, t in enumerate(reader.inputs):
                if t is y:
                    reader.inputs[i] = source
        _drop(node, readers[0], done)
        middle = squeeze.outputs[0]
        if not middle.outputs and id(middle) not in outputs:
            _drop(squeeze, readers[0], done)


def _drop(node: gs.Node, reader: gs.Node, done: Rewrites) -> None:
    node.inputs.clear()
    node.outputs.clear()
    # a model node went into its reader; an added one too, so what was merged into it
    # follows (merge_targets.py settles the chains)
    done.derived.pop(node.name, None)
    done.merged[node.name] = reader.name
