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
from mrvl_convert.frontend.pad_forms import Step, gather_matrix, replace_with_steps

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
        steps = _steps(node, spans, reversed_axes, names)
        what = replace_with_steps(graph, node, steps, done, names)
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

