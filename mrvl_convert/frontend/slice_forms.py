"""A Slice with a negative step as a positive-step Slice and 0/1 selection layers.

Requires: static shapes on each Slice's input and output (canonicalize runs this after the
rank lifts, so that a 1-D signal's Slice is already on its 4-D view).
Ensures: each float32 ``Slice`` outside an int8 region (opset 10 or later) whose starts, ends,
axes and steps are constants and one of whose steps is negative is rewritten into, in order:

1. a ``Slice`` with positive steps that picks the same elements in increasing order (left out
   when it would copy its input whole);
2. per axis of a negative step, the reversal of that axis: a ``MatMul`` by the ``[m, m]``
   anti-diagonal 0/1 matrix on the last axis (``pad_forms.gather_matrix``), a 1x1 ``Conv``
   whose weight is that matrix on the channels of a 4-D tensor, or on any other axis a
   ``Transpose`` swapping it with the last, the ``MatMul`` and the same ``Transpose`` back.

A reversed axis of ``m`` elements whose ``[m, m]`` matrix would exceed ``pad_forms.MAX_SELECTION``
(a waveform of 44100 samples flipped: a 7.8 GB matrix) is reversed in strips instead, on the
4-D view (Unsqueeze and Squeeze for rank 2 and 3, as ``pad_strips.py``): strips of at most
``b = sqrt(MAX_SELECTION)`` elements, each a ``Slice`` reversed by its ``[k, k]`` anti-diagonal
(one constant per strip length) as above, in reverse order joined by the channel ``Concat``
(channels) or each placed by ``pad_strips``' zero-padding 1x1 ``Conv`` and summed by ``Add``
(H and W): ``m b + m^2 / b`` multiply-adds per row instead of ``m^2``, the same exactness (each
output one input times 1 plus zeros). A long axis of rank 1, 5 or the batch axis stays, its
size in the reason. In this form the Slice's node becomes the last layer (it keeps its output).

The Slice's node keeps its name as the first of these, the others are ``derived`` from it;
``rewritten`` says what it became. A Slice none of this takes stays, the reason in ``kept``
(starts, ends or steps computed at run time, an empty result, rank 0).

Why: the accelerator's StridedSlice takes positive steps only; a reversal is a gather by a
fixed permutation, which a MatMul (or a 1x1 Conv) by its 0/1 matrix computes: ``m^2``
multiply-adds per reversed row (silero VAD reflects 3 of 8 frame means with two of them).

Exact: every output is one input times 1 plus 0 products of the others, in float32 and fp16
alike; the crop and the Transposes move data only. As in ``pad_forms.py``, a -0 input may come
out +0, and an infinite or NaN input turns the other outputs of its MatMul row or Conv
position into NaN (0 * inf), where the Slice copies it alone. Tests run the model before and
after on onnxruntime and compare bit for bit (``tests/frontend/test_slice_forms.py``).
"""
from __future__ import annotations

from typing import Dict, List, Tuple, Union

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, float_activation_issue, is_const, present, \
    static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.pad_forms import MAX_SELECTION, Step, gather_matrix, \
    replace_with_steps
from mrvl_convert.frontend.pad_strips import VIEW_AXES, _become_last, _Builder, _sized

Span = Tuple[int, int, int]  # the positive-step slice of one axis: start, end, step


def rewrite_reversed_slices(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite each Slice with a negative step the forms take, in place; True when one changed
    (the caller cleans up and sorts the graph)."""
    names, changed = Names(graph), False
    for node in list(graph.nodes):
        if node.op != "Slice" or not node.outputs or opset < 10:
            continue
        plan = reversal_plan(node)
        if plan is None:
            continue
        if isinstance(plan, str):
            done.kept[node.name] = f"Slice stays as it is: {plan}"
            continue
        spans, reversed_axes = plan
        long_axes = [a for a in reversed_axes if _is_long(node, spans, a)]
        too_long = _unstripped(node, spans, long_axes)
        if too_long:
            done.kept[node.name] = f"Slice stays as it is: {too_long}"
            continue
        what = _replace_with_strips(graph, node, spans, reversed_axes, long_axes, done, names,
                                    opset) if long_axes else \
            replace_with_steps(graph, node, _steps(node, spans, reversed_axes, names), done, names)
        done.rewritten[node.name] = f"Slice with a negative step became {what}: exact for " \
                                    f"finite inputs"
        changed = True
    return changed


def reversal_plan(node: gs.Node) -> Union[None, str, Tuple[Dict[int, Span], List[int]]]:
    """None when no step is negative; else the positive-step span of every sliced axis and the
    axes to reverse after it, or why the forms do not take it."""
    steps_input = present(node, 4)
    if steps_input is None or not is_const(steps_input):
        return None if steps_input is None else "its steps are computed at run time"
    if not (const_value(steps_input) < 0).any():
        return None
    x, y = node.inputs[0], node.outputs[0]
    src, issue = static_shape(x), float_activation_issue(x, y)
    if issue or not src or static_shape(y) is None:
        return issue or "its shapes are not static or it is rank 0"
    given = [present(node, k) for k in (1, 2, 3)]
    if any(t is not None and not is_const(t) for t in given):
        return "its starts, ends or axes are computed at run time"
    starts, ends = (const_value(t).reshape(-1).astype(np.int64) for t in given[:2])
    axes = const_value(given[2]).reshape(-1) if given[2] is not None else np.arange(len(starts))
    spans: Dict[int, Span] = {}
    reversed_axes: List[int] = []
    for start, end, axis, step in zip(starts, ends, axes,
                                      const_value(steps_input).reshape(-1)):
        axis = int(axis) % len(src)
        index = onnx_indices(src[axis], int(start), int(end), int(step))
        if not len(index):
            return f"it leaves axis {axis} empty"
        spans[axis] = (int(index.min()), int(index.max()) + 1, abs(int(step)))
        if step < 0 and len(index) > 1:
            reversed_axes.append(axis)
    return spans, reversed_axes


def onnx_indices(size: int, start: int, end: int, step: int) -> np.ndarray:
    """The input indices onnxruntime's Slice reads along one axis, in output order (the
    operator's clamping: a negative bound counts from the end, then ``[0, size]`` for a
    positive step, ``[-1, size - 1]`` for the end of a negative one)."""
    start, end = (v + size if v < 0 else v for v in (start, end))
    if step > 0:
        start, end = min(max(start, 0), size), min(max(end, 0), size)
    else:
        start, end = min(max(start, 0), size - 1), min(max(end, -1), size - 1)
    return np.arange(start, end, step, dtype=np.int64)


def _steps(node: gs.Node, spans: Dict[int, Span], reversed_axes: List[int],
           names: Names) -> List[Step]:
    shape = list(static_shape(node.inputs[0]))

    def const(tag: str, value: np.ndarray) -> gs.Constant:
        return gs.Constant(names.fresh(f"{node.name}_{tag}"), value)

    steps: List[Step] = []
    moved = {a: s for a, s in spans.items() if s != (0, shape[a], 1)}
    if moved or not reversed_axes:  # a step of -1 over one element: a copy, kept a Slice
        axes = sorted(moved) or [0]
        moved = moved or {0: (0, shape[0], 1)}
        shape = [len(range(*moved[a])) if a in moved else n for a, n in enumerate(shape)]
        steps.append(("Slice", [const(tag, np.array([moved[a][k] for a in axes], np.int64))
                                for k, tag in ((0, "starts"), (1, "ends"))]
                      + [const("axes", np.array(axes, np.int64)),
                         const("steps", np.array([moved[a][2] for a in axes], np.int64))],
                      {}, list(shape)))
    for axis in reversed_axes:
        steps += _reversal(axis, shape, const)
    return steps


def _kept_size(node: gs.Node, spans: Dict[int, Span], axis: int) -> int:
    """The size of ``axis`` after the positive-step crop."""
    size = static_shape(node.inputs[0])[axis]
    return len(range(*spans[axis])) if axis in spans else size


def _is_long(node: gs.Node, spans: Dict[int, Span], axis: int) -> bool:
    """True when the axis' ``[m, m]`` reversal matrix would hold more than ``MAX_SELECTION``
    elements (its bytes grow with the square of the axis)."""
    return _kept_size(node, spans, axis) ** 2 > MAX_SELECTION


def _unstripped(node: gs.Node, spans: Dict[int, Span], long_axes: List[int]) -> str:
    """Why a long reversal has no strip form here ('' when it has): strips are placed by the
    4-D layers (Conv on H and W, the channel Concat)."""
    rank = len(static_shape(node.inputs[0]))
    for axis in long_axes:
        if rank not in VIEW_AXES or axis == 0:
            m = _kept_size(node, spans, axis)
            return f"a {m} x {m} reversal matrix of axis {axis} of a {rank}-D tensor would " \
                   f"exceed {MAX_SELECTION} elements, and its strips are formed on the H, W " \
                   f"or channel axis of a 2-D to 4-D tensor only"
    return ""


def _replace_with_strips(graph: gs.Graph, node: gs.Node, spans: Dict[int, Span],
                         reversed_axes: List[int], long_axes: List[int], done: Rewrites,
                         names: Names, opset: int) -> str:
    """The crop and the short axes' reversals as ``_steps`` makes them, then each long axis
    reversed by strips (``_reverse_in_strips``); the Slice's node becomes the last layer."""
    build = _Builder(graph, node, names, done, opset)
    short = [a for a in reversed_axes if a not in long_axes]
    x, shape = node.inputs[0], list(static_shape(node.inputs[0]))
    moved = any(s != (0, shape[a], 1) for a, s in spans.items())
    for op, consts, attrs, out in _steps(node, spans, short, names) if moved or short else []:
        x, shape = build.op(op, [x] + consts, out, **attrs), list(out)
    rank = len(shape)
    if rank < 4:  # on the 4-D view, as pad_strips.py: [N, C, L] as [N, C, 1, L]
        x = build.axes("Unsqueeze", x, VIEW_AXES[rank], (shape + [1, 1])[:2] + [1] *
                       (4 - rank) + shape[2:])
    view = list(static_shape(x))
    for axis in long_axes:
        x = _reverse_in_strips(build, x, view, 3 if rank == 3 and axis == 2 else axis)
    if rank < 4:
        x = build.axes("Squeeze", x, VIEW_AXES[rank], shape)
    _become_last(node, build.added, node.outputs[0])
    return " -> ".join(n.op for n in build.added)


def _reverse_in_strips(build: _Builder, x: gs.Tensor, shape: List[int],
                       axis: int) -> gs.Tensor:
    """``x`` reversed on ``axis`` (1, 2 or 3 of a 4-D tensor) as strips of at most ``b``
    elements, ``b * b <= MAX_SELECTION``: each strip a Slice reversed by its ``[k, k]``
    anti-diagonal (one constant per strip length), the strips in reverse order joined by the
    channel Concat, or on H and W each placed by the zero-padding 1x1 Conv and summed by Adds."""
    m, b = shape[axis], int(np.sqrt(MAX_SELECTION))
    flips: Dict[int, gs.Constant] = {}
    strips = []
    for low in reversed(range(0, m, b)):
        high = min(low + b, m)
        strip = build.slice(x, axis, low, high, _sized(shape, axis, high - low))
        strips.append((low, high, _flip_strip(build, strip, _sized(shape, axis, high - low),
                                              axis, flips)))
    if axis == 1:
        return build.op("Concat", [s for *_, s in strips], shape, axis=1)
    total = None
    for low, high, strip in strips:
        placed = build.place(strip, _sized(shape, axis, high - low), axis, m - high, low)
        total = placed if total is None else build.op("Add", [total, placed], shape)
    return total


def _flip_strip(build: _Builder, strip: gs.Tensor, shape: List[int], axis: int,
                flips: Dict[int, gs.Constant]) -> gs.Tensor:
    """One strip reversed on ``axis`` by ``_reversal``'s layers, its matrix shared by length."""
    k = shape[axis]

    def const(tag: str, value: np.ndarray) -> gs.Constant:
        if k not in flips:
            flips[k] = build.const(tag, value)
        return flips[k]
    for op, consts, attrs, out in _reversal(axis, shape, const):
        strip = build.op(op, [strip] + consts, out, **attrs)
    return strip


def _reversal(axis: int, shape: List[int], const) -> List[Step]:
    """The layers reversing ``axis`` of a tensor of ``shape``."""
    m, rank = shape[axis], len(shape)
    flip = gather_matrix(np.arange(m)[::-1].copy(), m)  # symmetric: its own transpose
    if rank == 4 and axis == 1:
        return [("Conv", [const("flip", flip[:, :, None, None])], {"kernel_shape": [1, 1]},
                 list(shape))]
    if axis == rank - 1:
        return [("MatMul", [const("flip", flip)], {}, list(shape))]
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    turned = [shape[p] for p in perm]
    return [("Transpose", [], {"perm": perm}, turned),
            ("MatMul", [const("flip", flip)], {}, turned),
            ("Transpose", [], {"perm": perm}, list(shape))]

