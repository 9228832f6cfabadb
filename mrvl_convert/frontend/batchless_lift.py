"""Batchless regions computed on their ``[1, H, W, C]`` form.

A model that wraps each Conv as ``Unsqueeze(0) -> Transpose -> Conv -> Transpose -> Squeeze(0)``
(madmom's music nets, exported from their own NHWC layers) computes its BN scale, shift, Elu,
Pad and Slice between the wrappers on a batchless ``[H, W, C]``: the layers' 4-D forms (a
per-channel affine is a depthwise Conv2D) and their NHWC layout take ``[1, H, W, C]``.

Requires: static shapes on the region's tensors.
Ensures: each region (below) reads the Squeeze's 4-D input, its tensors are ``[1] + shape``,
and the readers of each closing ``Unsqueeze(0)`` read the region's 4-D tensor; the Squeeze and
Unsqueeze nodes are merged into their readers. The graph's outputs keep their names, shapes
and values.

- A region starts at a ``Squeeze`` of axis 0 (only) of a 4-D tensor whose axis 0 is 1, grows
  over readers that are elementwise ops (``_ELEMENTWISE``) whose other operands are constants
  of rank <= 3 or region tensors, ``Pad`` with constant pads (no ``axes`` input) and ``Slice``
  with constant axes, and ends at ``Unsqueeze`` of axis 0 (only). Every reader of a region
  tensor is one of these, and no region tensor is a graph output, or it is not lifted.
- A region may also end at a ``ReduceMean`` over ``H`` and ``W`` of ``[H, W, C]`` (axes 0 and
  1, keepdims 0: madmom's key CNN's global average pool): it becomes ``Transpose`` to
  ``[1, C, H, W]``, ``ReduceMean`` over axes 2 and 3 (``global_means.py`` then keeps the dims
  for the global pool) and ``Squeeze`` of axis 0 writing the ``[C]`` the model had.
- Exact: ONNX broadcasting aligns shapes from the last axis, so an elementwise op of
  ``[1, H, W, C]`` with a constant of rank <= 3 computes the same elements as on ``[H, W, C]``;
  Pad pads 0 on the new axis, Slice's axes shift by one. Squeeze/Unsqueeze copy. The tests
  compare the outputs bit for bit (``tests/frontend/test_batchless_input.py``). The closing
  mean is exact in real arithmetic; onnxruntime sums the strided ``[H W, C]`` and the contiguous
  ``[C, H W]`` in other orders, at most ``2 (H W - 1) 2**-24 mean|x|`` apart.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, const_value, is_const, present, reduce_axes,
                                     squeeze_axes, static_shape)
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.sequence_forms import mean_of_nchw_view

_ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Elu", "Relu", "LeakyRelu", "Tanh",
    "Sigmoid", "Clip", "Exp", "Abs", "Neg", "Sqrt", "Softplus", "Selu", "HardSigmoid",
    "Identity", "Cast",
})


def _axis0_only(node: gs.Node, op: str) -> bool:
    axes = squeeze_axes(node) if node.op == op else None
    src = static_shape(node.inputs[0]) if node.inputs else None
    if not axes or src is None:
        return False
    rank = len(src) + 1 if op == "Unsqueeze" else len(src)
    return [a % rank for a in axes] == [0]


def _fits(node: gs.Node, region: set) -> bool:
    """A node of a region: its activation operands are region tensors, the rest constants of
    rank <= 3 (elementwise) or the constant geometry of Pad / Slice."""
    acts = [t for t in node.inputs if not is_const(t)]
    if not acts or any(t.name not in region for t in acts) or len(node.outputs) != 1:
        return False
    if node.op in _ELEMENTWISE:
        return all(const_value(t).ndim <= 3 for t in node.inputs if is_const(t))
    if node.op == "Pad":
        return acts == [node.inputs[0]] and len(node.inputs) <= 3 and is_const(node.inputs[1])
    if node.op == "Slice":
        return acts == [node.inputs[0]] and all(is_const(t) for t in node.inputs[1:])
    return False


def _grow(graph: gs.Graph, start: gs.Tensor, outputs: set) -> Optional[List[gs.Node]]:
    """The region's nodes in graph order, closing Unsqueezes included; None if it is open. A
    node reading two region tensors (a residual Add) waits until both are in the region."""
    region, nodes, waiting, frontier = {start.name}, [], set(), [start]
    while frontier:
        tensor = frontier.pop()
        if tensor.name in outputs or static_shape(tensor) is None:
            return None
        for reader in tensor.outputs:
            if any(reader is n for n in nodes):
                continue
            if _axis0_only(reader, "Unsqueeze") or _spatial_mean(reader):
                nodes.append(reader)
                continue
            if any(not is_const(t) and t.name not in region for t in reader.inputs):
                waiting.add(id(reader))
                continue
            if not _fits(reader, region):
                return None
            nodes.append(reader)
            region.add(reader.outputs[0].name)
            frontier.append(reader.outputs[0])
    return None if waiting - {id(n) for n in nodes} else nodes


def _spatial_mean(node: gs.Node) -> bool:
    """A ReduceMean of ``[H, W, C]`` over H and W, dropping them: the region's global pool."""
    src = static_shape(node.inputs[0]) if node.inputs else None
    return (node.op == "ReduceMean" and src is not None and len(src) == 3
            and int(attr(node, "keepdims", 1)) == 0 and reduce_axes(node) == [0, 1])


def _close_with_mean(graph: gs.Graph, mean: gs.Node, opset: int, names: Names,
                     done: Rewrites) -> None:
    """``ReduceMean([1, H, W, C], 0 1)`` -> Transpose to NCHW, ReduceMean over 2 and 3,
    Squeeze(0): the global pool the layer set has (module docstring)."""
    out = mean.outputs[0]
    turn, pooled = mean_of_nchw_view(mean, 0, opset, names, "axes_nchw")
    drop = gs.Node("Squeeze", names.fresh(f"{mean.name}_drop_batch"),
                   attrs={} if opset >= 13 else {"axes": [0]},
                   inputs=[pooled] + ([gs.Constant(names.fresh(f"{mean.name}_axis0"),
                                                   np.array([0], np.int64))]
                                      if opset >= 13 else []), outputs=[out])
    graph.nodes.extend([turn, drop])
    done.derived.update({turn.name: mean.name, drop.name: mean.name})
    done.rewritten[mean.name] = ("ReduceMean over H and W of a batchless [H, W, C] as "
                                 "Transpose to [1, C, H, W], ReduceMean over 2 and 3, Squeeze(0)")


def _lift_node(node: gs.Node, done: Rewrites) -> None:
    out = node.outputs[0]
    out.shape = [1] + list(static_shape(out))
    if node.op == "Pad":
        pads = const_value(node.inputs[1]).reshape(-1)
        half = len(pads) // 2
        node.inputs[1] = gs.Constant(f"{node.name}_pads_4d", np.concatenate(
            [[0], pads[:half], [0], pads[half:]]).astype(np.int64))
    elif node.op == "Slice":
        starts = const_value(node.inputs[1]).reshape(-1)
        axes = present(node, 3)
        old = const_value(axes).reshape(-1) if axes is not None else np.arange(len(starts))
        new = np.where(old >= 0, old + 1, old).astype(np.int64)
        while len(node.inputs) < 4:
            node.inputs.append(gs.Variable.empty())
        node.inputs[3] = gs.Constant(f"{node.name}_axes_4d", new)
    done.rewritten[node.name] = f"{node.op} on the [1, H, W, C] view of a batchless tensor"


def _reroute(tensor: gs.Tensor, to: gs.Tensor) -> None:
    for reader in list(tensor.outputs):
        for i, t in enumerate(reader.inputs):
            if t is tensor:
                reader.inputs[i] = to


def _pad_after_transpose(pad: gs.Node, outputs: set) -> None:
    """A lifted Pad read only by a Transpose (the wrapper into a Conv's NCHW) moves after it,
    its pads permuted: the Conv composite folds a Pad that it reads. Exact: padding commutes
    with a permutation of the axes it pads."""
    out = pad.outputs[0]
    if len(out.outputs) != 1 or out.outputs[0].op != "Transpose" or out.name in outputs:
        return
    transpose = out.outputs[0]
    perm = [int(p) for p in transpose.attrs.get("perm", [])]
    pads = const_value(pad.inputs[1]).reshape(-1)
    if sorted(perm) != list(range(4)) or len(pads) != 8:
        return
    moved = transpose.outputs[0]
    inner = gs.Variable(f"{pad.name}_nchw", dtype=moved.dtype,
                        shape=[static_shape(pad.inputs[0])[p] for p in perm])
    source = pad.inputs[0]
    pad.outputs.clear()
    transpose.outputs.clear()
    transpose.inputs[0] = source
    transpose.outputs.append(inner)
    pad.inputs[0] = inner
    pad.outputs.append(moved)
    pad.inputs[1] = gs.Constant(f"{pad.name}_pads_nchw", np.array(
        [pads[p] for p in perm] + [pads[4 + p] for p in perm], np.int64))


def _merge(done: Rewrites, name: str, into: str) -> None:
    """A node went into ``into`` (one an earlier rewrite added too: what was merged into it
    follows, merge_targets.py)."""
    done.derived.pop(name, None)
    done.merged[name] = into


def lift_batchless(graph: gs.Graph, done: Rewrites, opset: int = 13) -> bool:
    """Lift every closed batchless region of ``graph`` in place, recording it in ``done``;
    True when one was lifted (the caller then cleans up and sorts the graph)."""
    outputs, lifted, names = {t.name for t in graph.outputs}, False, Names(graph)
    for squeeze in list(graph.nodes):
        src = static_shape(squeeze.inputs[0]) if squeeze.inputs else None
        if not _axis0_only(squeeze, "Squeeze") or not src or len(src) != 4 or src[0] != 1:
            continue
        nodes = _grow(graph, squeeze.outputs[0], outputs)
        if nodes is None:
            continue
        closing = [n for n in nodes if n.op == "Unsqueeze"]
        means = [n for n in nodes if n.op == "ReduceMean" and _spatial_mean(n)]
        if any(n.outputs[0].name in outputs for n in closing):
            continue
        body = [n for n in nodes if n.op != "Unsqueeze" and not any(n is m for m in means)]
        # The Squeeze (and an Unsqueeze right after it) went into the region's first node, or
        # with no node between them into the node writing the 4-D tensor.
        first = body[0].name if body else (squeeze.inputs[0].inputs[0].name
                                           if squeeze.inputs[0].inputs else None)
        if first is None:
            continue
        for node in body:
            _lift_node(node, done)
        _reroute(squeeze.outputs[0], squeeze.inputs[0])
        _merge(done, squeeze.name, first)
        squeeze.inputs.clear()
        squeeze.outputs.clear()
        for node in closing:
            _reroute(node.outputs[0], node.inputs[0])
            _merge(done, node.name, node.inputs[0].inputs[0].name if node.inputs[0].inputs
                   else first)  # the region's last node, or the one writing the 4-D tensor
            node.inputs.clear()
            node.outputs.clear()
        for node in means:
            _close_with_mean(graph, node, opset, names, done)
        for node in body:
            if node.op == "Pad":
                _pad_after_transpose(node, outputs)
        lifted = True
    return lifted
