"""Sliding windows of frames read by a fully connected layer: a Conv along the frame axis.

madmom's onset CNN cuts its ``[T, W, C]`` frames into K windows (``Slice`` of axis 0 at offsets
o, o + d, ..., each ``Unsqueeze``d at one axis a >= 1 and joined by a ``Concat`` along a: the
stack ``[L, ..., K, ...]``), flattens each window (``Flatten`` at 1, or a ``Reshape`` to
``[L, F]``) and multiplies by a constant ``[F, O]``: an unfold and an FC, which is a convolution
of kernel ``K x W`` and dilation ``d`` along the frames. The layer set has no unfold (its
Concat joins channels of one batch), but it has the Conv.

Requires: static shapes, constant Slice geometry and weights, opset 13 or later (the Squeeze
and Unsqueeze axes it writes are inputs).
Ensures: each such MatMul is a ``Conv`` (keeping the MatMul's name and output tensor) on the
frames as madmom wraps its own Convs, ``Unsqueeze(0) -> Transpose -> Conv -> Transpose ->
Squeeze(0)`` (``sequence_lift.py`` then computes it on ``[1, T, ...]``), its weight
``w[o, c, k, j] = B[f(k, j, c), o]`` where f is where the stack put frame k's element (j, c);
the Slices, Unsqueezes, Concat and Flatten that only fed it are gone. Frames ``[T, C]`` are
an image of W = 1, frames ``[T]`` one of W = C = 1.

In a QDQ model (int8, ``window_pairs.py``) the Slices, Unsqueezes, Concat and Flatten may each
be followed by a per-tensor ``QuantizeLinear -> DequantizeLinear`` pair, the frames may be
DequantizeLinear copies of one int8 tensor, and the MatMul reads the DequantizeLinear of an
int8 ``[F, O]`` matrix and is read by one QuantizeLinear. When every window passes the same
pairs, the Conv reads the frames through them (after its Unsqueeze and Transpose, where the
int8 Conv's pattern wants them: the pairs commute with the selections), its weight is the int8
matrix rearranged under the same DequantizeLinear, and its output passes a pair of the
MatMul's output scale before the Transpose and a Reshape (not a Squeeze of the unit W, which
would seed ``rank_lift.py``'s ``[N, C, L]`` view of the frames) back to ``[L, O]``. Windows of
different scales are left as they are. The pairs are exact (``window_pairs.py``); the bound is
the sum's, below.

Bound: each output is the same sum of the n = F products ``x * B`` as the MatMul's, added in
another order: two float32 sums of the same n terms are at most
``2 (n - 1) u sum |x B|`` apart (u = 2**-24). The tests compare onnxruntime's outputs within
it (``tests/frontend/test_window_conv.py``; int8: ``test_window_conv_int8.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, const_value, is_const, only_reader, present,
                                      same_value, static_shape)
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.derived_nodes import DerivedNodes
from mrvl_convert.frontend.sequence_ops import kept_names
from mrvl_convert.frontend.window_pairs import (Pair, add_pair, distinct, int8_weight,
                                                output_pair, unpaired)


@dataclass
class _Windows:
    frames: gs.Tensor            # x [T, ...]
    start: int                   # the first window's first frame
    length: int                  # L: frames in each window's output
    dilation: int                # d: frames between consecutive windows
    axis: int                    # where the stack put the window index (1 .. rank)
    count: int                   # K: windows
    nodes: List[gs.Node]         # Slices, Unsqueezes, Concat, Flatten / Reshape (Q/DQ pairs)
    pairs: List[Pair] = field(default_factory=list)  # int8: the pairs the frames pass, in order
    weight: Optional[gs.Node] = None   # int8: the DequantizeLinear of the weight
    out: Optional[Pair] = None         # int8: the MatMul's output pair


def rewrite_window_convs(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite every windowed FC of ``graph`` in place, recording it in ``done``; True when
    one was (the caller then cleans up and sorts the graph)."""
    if opset < 13:
        return False
    names, changed = Names(graph), False
    outputs = kept_names(graph)
    for matmul in [n for n in graph.nodes if n.op == "MatMul"]:
        windows = _windows(matmul, outputs)
        if windows is not None:
            _as_conv(graph, matmul, windows, names, done)
            changed = True
    return changed


def _windows(matmul: gs.Node, outputs: set) -> Optional[_Windows]:
    weight, flat = matmul.inputs[1], matmul.inputs[0]
    int8 = int8_weight(weight)
    matrix = const_value(int8.inputs[0] if int8 is not None else weight) \
        if int8 is not None or is_const(weight) else None
    if matrix is None or matrix.ndim != 2 or only_reader(flat, outputs) is not matmul \
            or flat.dtype is None or not np.issubdtype(np.dtype(flat.dtype), np.floating):
        return None
    pairs: List[Pair] = []
    flat, nodes = _skip_pair(flat, outputs, pairs, [])
    flatten = flat.inputs[0] if flat.inputs else None
    shape = static_shape(flat)
    if flatten is None or shape is None or len(shape) != 2 or matrix.shape[0] != shape[1] \
            or not (flatten.op == "Flatten" and int(attr(flatten, "axis", 1)) == 1
                    or flatten.op == "Reshape" and is_const(flatten.inputs[1])):
        return None
    stacked, nodes = _skip_pair(flatten.inputs[0], outputs, pairs, nodes + [flatten])
    concat = stacked.inputs[0] if stacked.inputs else None
    if concat is None or concat.op != "Concat" \
            or only_reader(flatten.inputs[0], outputs) is not flatten:
        return None
    found = _stack(concat, shape[0], outputs, nodes + [concat], pairs)
    if found is None or int8 is None:
        return found if found is not None and not found.pairs else None
    found.weight, found.out = int8, output_pair(matmul.outputs[0], outputs)
    return found if found.pairs and found.out is not None else None


def _skip_pair(tensor: gs.Tensor, outputs: set, pairs: List[Pair], nodes: List[gs.Node]
               ) -> Tuple[gs.Tensor, List[gs.Node]]:
    """The tensor behind a Q/DQ pair giving ``tensor`` (its pair put first in ``pairs``, its
    nodes added to ``nodes``), or ``tensor``."""
    source, pair = unpaired(tensor, outputs)
    if pair is None:
        return tensor, nodes
    pairs.insert(0, pair)
    return source, nodes + list(pair.nodes)


def _stack(concat: gs.Node, length: int, outputs: set, nodes: List[gs.Node],
           pairs: List[Pair]) -> Optional[_Windows]:
    rank = len(static_shape(concat.outputs[0]) or [])
    axis = int(attr(concat, "axis", 0)) % rank if rank else 0
    slices, paired = [], []
    for piece in concat.inputs:
        if only_reader(piece, outputs) is not concat:
            return None
        mine: List[Pair] = []
        piece, nodes = _skip_pair(piece, outputs, mine, nodes)
        unsqueeze = piece.inputs[0] if piece.inputs else None
        if unsqueeze is None or unsqueeze.op != "Unsqueeze" or _axes(unsqueeze, rank) != [axis]:
            return None
        cut, nodes = _skip_pair(unsqueeze.inputs[0], outputs, mine, nodes + [unsqueeze])
        if not cut.inputs:
            return None
        slices.append(cut.inputs[0])
        paired.append(mine)
    # every window through the same pairs (or none): one function of each frame element
    if any(len(p) != len(paired[0]) or not all(a.same(b) for a, b in zip(p, paired[0]))
           for p in paired):
        return None
    frames = slices[0].inputs[0] if slices[0].op == "Slice" else None
    if axis < 1 or frames is None or not 2 <= rank <= 4 or static_shape(frames) is None:
        return None
    starts = [_frame_window(s, frames, length) for s in slices]
    if any(s is None for s in starts) or any(
            len(s.outputs[0].outputs) != 1 for s in slices):
        return None
    step = starts[1] - starts[0] if len(starts) > 1 else 1
    if step < 1 or starts != [starts[0] + k * step for k in range(len(starts))]:
        return None
    return _Windows(frames, starts[0], length, step, axis, len(slices), nodes + slices,
                    distinct(paired[0] + pairs))


def _axes(node: gs.Node, rank: int) -> Optional[List[int]]:
    axes = node.attrs.get("axes")
    if axes is None:
        tensor = present(node, 1)
        axes = const_value(tensor).reshape(-1) if tensor is not None and is_const(tensor) \
            else None
    return None if axes is None else sorted(int(a) % rank for a in axes)


def _frame_window(node: gs.Node, frames: gs.Tensor, length: int) -> Optional[int]:
    """The first frame of a Slice of ``frames`` along axis 0 only, step 1, ``length`` frames
    long; None for any other node."""
    if node.op != "Slice" or not same_value(node.inputs[0], frames) or len(node.inputs) < 3 \
            or not all(is_const(t) for t in node.inputs[1:] if t.name):
        return None
    total, rank = static_shape(frames)[0], len(static_shape(frames))
    starts, ends = (const_value(node.inputs[i]).reshape(-1) for i in (1, 2))
    axes = present(node, 3)
    steps = present(node, 4)
    if len(starts) != 1 or (axes is not None and int(const_value(axes).reshape(-1)[0]) % rank) \
            or (steps is not None and int(const_value(steps).reshape(-1)[0]) != 1):
        return None
    begin, end = (int(np.clip(v + total if v < 0 else v, 0, total)) for v in
                  (int(starts[0]), int(min(ends[0], total + 1))))
    return begin if end - begin == length else None


def _as_conv(graph: gs.Graph, matmul: gs.Node, windows: _Windows, names: Names,
             done: Rewrites) -> None:
    x = windows.frames
    shape = static_shape(x)
    kernel = windows.count
    # NHWC: [T, W, C] -> [1, T, W, C]; [T, C] -> [1, T, 1, C]; [T] -> [1, T, 1, 1].
    image = [1, shape[0], shape[1] if len(shape) == 3 else 1, shape[-1] if len(shape) > 1 else 1]
    span = windows.length + (kernel - 1) * windows.dilation
    add = DerivedNodes(graph, names, done, matmul.name)
    if windows.start or span != shape[0]:
        x = add.node("Slice", [x, _i64(names, [windows.start]), _i64(names, [windows.start + span]),
                               _i64(names, [0])], shape=[span] + shape[1:], dtype=x.dtype)
    if len(shape) < 3:  # the channel last, a unit W before it
        x = add.node("Unsqueeze", [x, _i64(names, [1] if len(shape) == 2 else [1, 2])],
                     shape=[span, 1, image[3]], dtype=x.dtype)
    x = add.node("Unsqueeze", [x, _i64(names, [0])], shape=[1, span] + image[2:], dtype=x.dtype)
    x = add.node("Transpose", [x], shape=[1, image[3], span, image[2]], dtype=x.dtype,
                 perm=[0, 3, 1, 2])
    for pair in windows.pairs:  # int8: the frames through the windows' pairs, as the Conv's input
        x = add_pair(x, pair, add.node)
    out = matmul.outputs[0]
    outs = static_shape(out)[1]
    conv = gs.Variable(names.fresh(f"{matmul.name}_conv"), dtype=out.dtype,
                       shape=[1, outs, windows.length, 1])
    weight = _weight(matmul, windows, kernel, shape, image, names)
    for node in windows.nodes:
        node.inputs.clear()
        node.outputs.clear()
        done.merged[node.name] = matmul.name
    matmul.op = "Conv"
    matmul.inputs.clear()
    matmul.inputs.extend([x, weight])
    matmul.outputs[0] = conv
    matmul.attrs.update(kernel_shape=[kernel, image[2]], dilations=[windows.dilation, 1],
                        strides=[1, 1], pads=[0, 0, 0, 0])
    y = add_pair(conv, windows.out, add.node) if windows.out is not None else conv
    y = add.node("Transpose", [y], shape=[1, windows.length, 1, outs], dtype=out.dtype,
                 perm=[0, 2, 3, 1])
    y = add.node("Squeeze", [y, _i64(names, [0])], shape=[windows.length, 1, outs],
                 dtype=out.dtype)
    if windows.out is None:
        add.node("Squeeze", [y, _i64(names, [1])], out=out)
    else:  # int8: a Squeeze of the unit W would seed rank_lift's [N, C, L] view of the frames,
        # which lifts a following int8 FC's QuantizeLinear without its MatMul
        add.node("Reshape", [y, _i64(names, [windows.length, outs])], out=out)
    done.rewritten[matmul.name] = (f"{kernel} windows of frames (dilation {windows.dilation}) "
                                   "read by an FC: a Conv along the frames")


def _weight(matmul: gs.Node, windows: _Windows, kernel: int, shape: List[int],
            image: List[int], names: Names) -> gs.Tensor:
    """The Conv's weight: the MatMul's matrix rearranged; an int8 one's integers rearranged
    under the same DequantizeLinear (one scale: the same values)."""
    dq = windows.weight
    matrix = const_value(dq.inputs[0] if dq is not None else matmul.inputs[1])
    weight = _conv_weight(matrix, kernel, windows.axis, shape, image)
    constant = gs.Constant(names.fresh(f"{matmul.name}_w"), weight)
    if dq is None:
        return constant
    dq.inputs[0] = constant
    dq.outputs[0].shape = list(weight.shape)
    return dq.outputs[0]


def _conv_weight(matrix: np.ndarray, kernel: int, axis: int, shape: List[int],
                 image: List[int]) -> np.ndarray:
    """``w[o, c, k, j] = B[f(k, j, c), o]``: f is the flat position of window k's element."""
    rest = shape[1:]
    stacked = rest[:axis - 1] + [kernel] + rest[axis - 1:]
    where = np.moveaxis(np.arange(int(np.prod(stacked))).reshape(stacked), axis - 1, 0)
    where = where.reshape(kernel, image[2], image[3])  # [K, W, C]
    return np.ascontiguousarray(matrix[where].transpose(3, 2, 0, 1)).astype(matrix.dtype)


def _i64(names: Names, values: List[int]) -> gs.Constant:
    return gs.Constant(names.fresh("window_conv_i64"), np.array(values, np.int64))
