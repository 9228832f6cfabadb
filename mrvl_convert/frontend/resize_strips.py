"""A linear Resize of a long axis as ``resize_matrices.py``'s MatMuls in bounded output strips.

``resize_matrices.py`` interpolates an axis of ``size`` samples to ``out`` by a MatMul with the
``[size, out]`` matrix: 44100 samples to 48000 make an 8 GB float32 constant. When a matrix
would hold more than ``pad_forms.MAX_SELECTION`` elements this module computes the same
products in strips of the output instead, so that no constant it writes grows with the axis.

Requires: what ``resize_matrices.rewrite_as_matmuls`` requires, and opset 10 or later (Slice
with constant inputs; ``strip_issue`` names an earlier one, and the node then stays).
Ensures: the node is replaced by, per axis (W, then H between the ``Transpose(0, 1, 3, 2)``
pair, as ``resize_matrices.py``): the one ``MatMul`` by the axis' matrix when it is within the
bound, else for each strip of at most ``b = sqrt(MAX_SELECTION)`` outputs ``[j0, j1)`` (fewer
where a shrink's strip would read so many inputs that its block exceeds the bound) a
``Slice`` of the inputs ``[lo, hi)`` its rows read, a ``MatMul`` by the matrix' block
``A[j0:j1, lo:hi]``, and ``pad_strips``' zero-padding 1x1 ``Conv`` placing the strip at
``j0``; the placed strips summed by ``Add``. The node becomes the last layer (it keeps its
output); the others are ``derived`` from it.

Size: each constant is a block of at most ``MAX_SELECTION`` elements; together they hold about
``b * size`` elements per long axis (one block of ``b`` rows per strip): linear in the axis,
not its square, but not small (44100 samples to 48000: 45 M elements, 180 MB float32, against
8.5 GB for the one matrix); smaller strips would cut the bytes and multiply the layers.

Bound: the block holds every non-zero of its rows, so each output is the same two products
plus exact zeros as in the whole MatMul, then plus the other strips' zeros: the bound of
``resize_matrices.py`` (``8 u max|x|`` over the window, finite inputs) holds unchanged, and a
-0 may come out +0.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.pad_forms import MAX_SELECTION
from mrvl_convert.frontend.pad_strips import _become_last, _Builder, _sized
from mrvl_convert.frontend.resize_matrices import Weights, interpolation_block, \
    interpolation_weights

Strip = Tuple[int, int, int, int]  # outputs j0, j1 and the inputs lo, hi they read


def axis_weights(node: gs.Node, coord: str, scales: Tuple[float, float]) -> List[Weights]:
    """The H and W interpolation weights of ``node`` (``resize_matrices.py``'s)."""
    src, dst = static_shape(node.inputs[0])[2:], static_shape(node.outputs[0])[2:]
    return [interpolation_weights(n, m, coord, s) for n, m, s in zip(src, dst, scales)]


def needs_strips(weights: List[Weights], sizes: List[int]) -> bool:
    """True when an axis' ``[out, size]`` matrix would exceed ``MAX_SELECTION`` elements."""
    return any(len(w[0]) * n > MAX_SELECTION for w, n in zip(weights, sizes))


def strips(weights: Weights) -> List[Strip]:
    """The output strips of one axis and the input spans they read: ``b`` outputs, halved
    while their block would exceed ``MAX_SELECTION`` (a shrink reads more inputs than it
    writes; one output reads two, so a strip always fits)."""
    low, high = weights[:2]
    spans: List[Strip] = []
    j0 = 0
    while j0 < len(low):
        length = int(np.sqrt(MAX_SELECTION))
        while True:
            j1 = min(j0 + length, len(low))
            lo, hi = int(low[j0:j1].min()), int(high[j0:j1].max()) + 1
            if (j1 - j0) * (hi - lo) <= MAX_SELECTION or length == 1:
                break
            length //= 2
        spans.append((j0, j1, lo, hi))
        j0 = j1
    return spans


def strip_issue(weights: List[Weights], sizes: List[int], opset: int) -> Optional[str]:
    """Why an axis whose matrix exceeds the bound has no strips here (the opset's Slice takes
    no constant inputs), or None."""
    for axis, w, n in zip("HW", weights, sizes):
        if len(w[0]) * n > MAX_SELECTION and opset < 10:
            return f"its {axis} interpolation matrix, {len(w[0])} x {n}, would exceed " \
                   f"{MAX_SELECTION} elements, and opset {opset}'s Slice takes no constant " \
                   f"inputs for its strips"
    return None


def rewrite_strips(graph: gs.Graph, node: gs.Node, weights: List[Weights], done: Rewrites,
                   names: Names, opset: int) -> str:
    """Replace ``node`` by the layers of the module docstring; the ops it became, in order.
    ``weights``: the H and W axes' (``axis_weights``)."""
    build = _Builder(graph, node, names, done, opset)
    x = node.inputs[0]
    shape = list(static_shape(x))
    x, shape = _along_last(build, x, shape, weights[1])
    turned = [shape[0], shape[1], shape[3], shape[2]]
    x = build.op("Transpose", [x], turned, perm=[0, 1, 3, 2])
    x, turned = _along_last(build, x, turned, weights[0])
    build.op("Transpose", [x], list(static_shape(node.outputs[0])), perm=[0, 1, 3, 2])
    _become_last(node, build.added, node.outputs[0])
    return " -> ".join(n.op for n in build.added)


def _along_last(build: _Builder, x: gs.Tensor, shape: List[int],
                weights: Weights) -> Tuple[gs.Tensor, List[int]]:
    """``x`` interpolated along its last axis: one MatMul within the bound, else placed strips
    summed."""
    size, out = shape[3], len(weights[0])
    sized = _sized(shape, 3, out)
    if size * out <= MAX_SELECTION:
        matrix = interpolation_block(weights, (0, out), (0, size))
        return build.op("MatMul", [x, build.const("a", matrix.T.copy())], sized), sized
    total = None
    for j0, j1, lo, hi in strips(weights):
        piece = build.slice(x, 3, lo, hi, _sized(shape, 3, hi - lo))
        block = interpolation_block(weights, (j0, j1), (lo, hi))
        piece = build.op("MatMul", [piece, build.const("a", block.T.copy())],
                         _sized(shape, 3, j1 - j0))
        placed = build.place(piece, _sized(shape, 3, j1 - j0), 3, j0, out - j1)
        total = placed if total is None else build.op("Add", [total, placed], sized)
    return total, sized
