"""Data-movement nodes run on index arrays: where each element of a tensor came from.

A chain of Transpose, Reshape, Squeeze, Unsqueeze, Flatten, SpaceToDepth, DepthToSpace, zero Pad
and Slice only moves elements. Run on ``arange(size)`` (int64) instead of the data, it gives,
for every element of its result, the flat index of the element of its input it copies, or -1
where a Pad wrote a zero. Two chains move the same way exactly when these arrays are equal,
whatever spelling an exporter chose (``space_to_batch.py`` compares them with the arrays
SpaceToBatch/BatchToSpace would give).

Requires: static output shapes; constant Pad/Slice operands.
Ensures: ``move(node, array)`` is what the node computes on the array, or None when the node is
no data movement of this list (or one it cannot read: a Pad of another value or mode, a
negative pad or Slice step).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Mapping, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, const_value, is_const, pad_amounts, pad_value, present,
                                     static_shape)

ABSENT = -1  # the index of an element a Pad wrote


def move(node: gs.Node, array: np.ndarray) -> Optional[np.ndarray]:
    """``node`` applied to ``array`` (its first input's indices), or None (see the module)."""
    handler = _MOVES.get(node.op)
    if handler is None or not node.outputs or static_shape(node.outputs[0]) is None:
        return None
    return handler(node, array)


def is_move(node: gs.Node) -> bool:
    return node.op in _MOVES


def _reshape(node: gs.Node, array: np.ndarray) -> Optional[np.ndarray]:
    shape = static_shape(node.outputs[0])
    return array.reshape(shape) if int(np.prod(shape)) == array.size else None


def _transpose(node: gs.Node, array: np.ndarray) -> Optional[np.ndarray]:
    perm = attr(node, "perm")
    return np.transpose(array, perm) if perm is not None else np.transpose(array)


def _space_to_depth(node: gs.Node, array: np.ndarray) -> Optional[np.ndarray]:
    b = int(attr(node, "blocksize"))
    if array.ndim != 4 or array.shape[2] % b or array.shape[3] % b:
        return None
    n, c, h, w = array.shape
    blocks = array.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return blocks.reshape(n, c * b * b, h // b, w // b)


def _depth_to_space(node: gs.Node, array: np.ndarray) -> Optional[np.ndarray]:
    b = int(attr(node, "blocksize"))
    if array.ndim != 4 or array.shape[1] % (b * b):
        return None
    n, c, h, w = array.shape
    if attr(node, "mode", "DCR") == "CRD":
        blocks = array.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        blocks = array.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return blocks.reshape(n, c // (b * b), h * b, w * b)


def _pad(node: gs.Node, array: np.ndarray) -> Optional[np.ndarray]:
    pads = pad_amounts(node)
    if attr(node, "mode", "constant") != "constant" or pad_value(node) != 0.0 or pads is None \
            or present(node, 3) is not None or len(pads) != 2 * array.ndim or min(pads) < 0:
        return None
    rank = array.ndim
    return np.pad(array, [(pads[a], pads[a + rank]) for a in range(rank)],
                  constant_values=ABSENT)


def _slice(node: gs.Node, array: np.ndarray) -> Optional[np.ndarray]:
    if "starts" in node.attrs:  # opset < 10: attributes, no steps
        starts, ends = attr(node, "starts"), attr(node, "ends")
        axes, steps = attr(node, "axes", list(range(len(starts)))), [1] * len(starts)
    else:
        operands = [present(node, i) for i in range(1, 5)]
        if any(t is not None and not is_const(t) for t in operands) \
                or any(t is None for t in operands[:2]):
            return None
        starts, ends = (const_value(t).reshape(-1).tolist() for t in operands[:2])
        axes = const_value(operands[2]).reshape(-1).tolist() if operands[2] is not None \
            else list(range(len(starts)))
        steps = const_value(operands[3]).reshape(-1).tolist() if operands[3] is not None \
            else [1] * len(starts)
    if min(steps, default=1) < 1:
        return None
    # Python's clamping of a positive-step slice is ONNX's.
    window = [slice(None)] * array.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        window[int(axis) % array.ndim] = slice(int(start), int(end), int(step))
    return array[tuple(window)]


_MOVES: Mapping[str, Callable[[gs.Node, np.ndarray], Optional[np.ndarray]]] = MappingProxyType({
    "Transpose": _transpose, "Reshape": _reshape, "Squeeze": _reshape, "Unsqueeze": _reshape,
    "Flatten": _reshape, "SpaceToDepth": _space_to_depth, "DepthToSpace": _depth_to_space,
    "Pad": _pad, "Slice": _slice,
})
