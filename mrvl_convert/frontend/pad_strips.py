"""A Pad of a long axis as its edge strips, each selected by a strip-sized matrix.

``pad_forms.py`` selects a reflect/edge pad of an axis of size ``n`` by a MatMul with the
``[n, b + n + e]`` 0/1 matrix: bytes quadratic in the axis. basic-pitch's CQT front end
reflect-pads its 43844-sample signal by 128 on each side: a 7.2 GiB float32 constant. Above
``pad_forms.MAX_SELECTION`` elements per matrix (``pad_forms.needs_strips``) this module
computes the same Pad from strips instead, so that no constant it writes grows with the axis
(the largest: a ``[b, b]`` selection, ``b`` the pad, or the ``[C, 1, 1, 1]`` ones).

``PadPlan`` (a Pad on its 4-D view) and ``gather_matrix`` live here, below ``pad_forms.py``,
which imports them. Requires: the ``PadPlan`` of ``pad_forms.pad_plan`` (reflect or edge mode, static shapes), opset
10 or later (Slice with constant inputs).
Ensures: on the Pad's 4-D view ``[N, C, H, W]`` (Unsqueeze and Squeeze for rank 2 and 3, the crop
first as one Slice, as ``pad_forms.py``), each padded axis in turn, with pads ``(b, e)``:

- the strip the begin pad copies (reflect: inputs ``1..b``; edge: input 0) as a ``Slice``, put
  in the pad's order by a MatMul with its ``[k, b]`` 0/1 selection (``k`` the strip's length:
  ``b`` or 1) on the last axis (the H axis between a Transpose pair of the strip); the end pad
  likewise;
- H and W: the input and the two strips each placed on the padded axis by a depthwise 1x1
  ``Conv`` of weight 1 with zero padding (its own ``pads``), and the three summed by two ``Add``:
  each output is one input times 1 plus two zeros;
- C: the strips selected by a 1x1 ``Conv`` with the ``[b, k]`` selection, the three joined by the
  channel ``Concat``.

A constant pad of many channels (``pad_forms.py``'s channel Conv has a ``[C', C]`` weight: 1 GB
for a ``[1, 16000]`` waveform) likewise: its pad channels made by a 1x1 ``Conv`` of weight 0 and
bias the value from the input's first channel, joined by the channel ``Concat``; H and W as
``pad_forms.py`` pads them (the zero-padding Conv, an ``Add`` of the value on the border, whose
``[1, 1, H', W']`` constant is one channel of the output).

Exact for finite inputs, as ``pad_forms.py``: every output is one input times 1 plus zeros, or
the value (0 times an input plus the value); a -0
input may come out +0, and an infinite or NaN input makes the other outputs of its strip's
MatMul NaN (0 * inf). The Pad's node becomes the last step (it keeps its output); the added nodes
are ``derived`` from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.frontend.canonical_forms import Names, Rewrites, _set_inputs, axes_operands

VIEW_AXES = {2: [2, 3], 3: [2], 4: []}  # Unsqueeze axes giving a rank's [N, C, H, W] view


@dataclass(frozen=True)
class PadPlan:
    """One Pad on its 4-D view: the shape it reads and its pads per axis after the crop."""
    mode: str
    value: float
    rank: int                      # the Pad's own rank (2 to 4)
    view: Tuple[int, ...]          # [N, C, H, W] it reads
    crop: Tuple[Tuple[int, int], ...]  # per axis of the view: removed at the start, at the end
    pads: Tuple[Tuple[int, int], ...]  # per axis of the view, after the crop: added


def gather_matrix(index: np.ndarray, size: int) -> np.ndarray:
    """``[len(index), size]`` 0/1: row j has a 1 at column ``index[j]`` (none where it is
    negative), so that a MatMul by its transpose gathers those inputs exactly."""
    matrix = np.zeros((len(index), size), np.float32)
    rows = np.flatnonzero(index >= 0)
    matrix[rows, index[rows]] = 1.0
    return matrix


@dataclass
class _Builder:
    """Adds nodes named after the Pad, each ``derived`` from it."""
    graph: gs.Graph
    node: gs.Node
    names: Names
    done: Rewrites
    opset: int
    added: List[gs.Node] = field(default_factory=list)

    def const(self, tag: str, value: np.ndarray) -> gs.Constant:
        return gs.Constant(self.names.fresh(f"{self.node.name}_{tag}"), value)

    def op(self, op: str, inputs: Sequence[gs.Tensor], shape: Sequence[int],
           **attrs: object) -> gs.Variable:
        out = gs.Variable(self.names.fresh(f"{self.node.outputs[0].name}_{op.lower()}"),
                          dtype=np.float32, shape=list(shape))
        added = gs.Node(op, self.names.fresh(f"{self.node.name}_{op.lower()}"), attrs=attrs,
                        inputs=list(inputs), outputs=[out])
        self.graph.nodes.append(added)
        self.added.append(added)
        self.done.derived[added.name] = self.node.name
        return out

    def slice(self, x: gs.Tensor, axis: int, start: int, end: int,
              shape: List[int]) -> gs.Variable:
        return self.op("Slice", [x, self.const("starts", np.array([start], np.int64)),
                                 self.const("ends", np.array([end], np.int64)),
                                 self.const("axes", np.array([axis], np.int64))], shape)

    def axes(self, op: str, x: gs.Tensor, axes: List[int], shape: List[int]) -> gs.Variable:
        consts, attrs = axes_operands(axes, self.opset, lambda v: self.const("view_axes", v))
        return self.op(op, [x] + consts, shape, **attrs)

    def place(self, x: gs.Tensor, shape: List[int], axis: int, before: int,
              after: int) -> gs.Variable:
        """``x`` zero-padded on H or W by a depthwise 1x1 Conv of weight 1."""
        pads = [0, 0, 0, 0]
        pads[axis - 2], pads[axis] = before, after
        out = list(shape)
        out[axis] += before + after
        ones = self.const("identity", np.ones((shape[1], 1, 1, 1), np.float32))
        return self.op("Conv", [x, ones], out, kernel_shape=[1, 1], group=shape[1], pads=pads)


def rewrite_strips(graph: gs.Graph, node: gs.Node, plan: PadPlan, done: Rewrites,
                   names: Names, opset: int) -> str:
    """Replace ``node`` by the strips form (module docstring); the ops it became, in order."""
    build = _Builder(graph, node, names, done, opset)
    x, y = node.inputs[0], node.outputs[0]
    shape = list(plan.view)
    if plan.rank < 4:
        x = build.axes("Unsqueeze", x, VIEW_AXES[plan.rank], shape)
    for axis, (b, e) in enumerate(plan.crop):
        if b or e:
            shape[axis] -= b + e
            x = build.slice(x, axis, b, shape[axis] + b, list(shape))
    for axis, (b, e) in enumerate(plan.pads):
        if b or e:
            x, shape = _pad_axis(build, x, shape, axis, (b, e), plan) if plan.mode != \
                "constant" else _pad_constant(build, x, shape, axis, (b, e), plan.value)
    if plan.rank < 4:
        x = build.axes("Squeeze", x, VIEW_AXES[plan.rank], list(y.shape))
    _become_last(node, build.added, y)
    return " -> ".join(n.op for n in build.added)


def _become_last(node: gs.Node, added: List[gs.Node], y: gs.Tensor) -> None:
    """The Pad's node takes the last added node's place, writing the Pad's output."""
    last = added.pop()
    node.op, node.attrs = last.op, dict(last.attrs)
    _set_inputs(node, list(last.inputs))
    node.outputs[0] = y
    last.inputs.clear()
    last.outputs.clear()
    added.append(node)


def _pad_axis(build: _Builder, x: gs.Tensor, shape: List[int], axis: int,
              pads: Tuple[int, int], plan: PadPlan) -> Tuple[gs.Tensor, List[int]]:
    size, (b, e) = shape[axis], pads
    index = np.pad(np.arange(size), (b, e), mode="reflect" if plan.mode == "reflect" else "edge")
    strips = [_strip(build, x, shape, axis, part)
              for part in (index[:b], index[b + size:]) if len(part)]
    out = list(shape)
    out[axis] += b + e
    if axis == 1:
        joined = ([strips.pop(0)] if b else []) + [x] + strips
        return build.op("Concat", joined, out, axis=1), out
    placed = [build.place(x, shape, axis, b, e)]
    if b:
        placed.append(build.place(strips.pop(0), _sized(shape, axis, b), axis, 0, size + e))
    if e:
        placed.append(build.place(strips.pop(0), _sized(shape, axis, e), axis, b + size, 0))
    total = placed[0]
    for term in placed[1:]:
        total = build.op("Add", [total, term], out)
    return total, out


def _pad_constant(build: _Builder, x: gs.Tensor, shape: List[int], axis: int,
                  pads: Tuple[int, int], value: float) -> Tuple[gs.Tensor, List[int]]:
    """A constant pad of one axis: channels made by a 1x1 Conv of weight 0 and bias ``value``
    from one input channel, joined by the channel Concat; H or W, the zero-padding Conv and, for
    a value other than 0, an Add of the value on the border (``[1, 1, H', W']``)."""
    out = list(shape)
    out[axis] += sum(pads)
    if axis == 1:
        one = build.slice(x, 1, 0, 1, _sized(shape, 1, 1))
        made = [build.op("Conv", [one, build.const("zero", np.zeros((n, 1, 1, 1), np.float32)),
                                  build.const("value", np.full(n, value, np.float32))],
                         _sized(shape, 1, n), kernel_shape=[1, 1]) if n else None
                for n in pads]
        return build.op("Concat", [t for t in (made[0], x, made[1]) if t is not None], out,
                        axis=1), out
    placed = build.place(x, shape, axis, *pads)
    if value == 0.0:
        return placed, out
    border = np.full([1, 1, *out[2:]], value, np.float32)
    inside = [slice(None)] * 4
    inside[axis] = slice(pads[0], pads[0] + shape[axis])
    border[tuple(inside)] = 0.0
    return build.op("Add", [placed, build.const("border", border)], out), out


def _strip(build: _Builder, x: gs.Tensor, shape: List[int], axis: int,
           index: np.ndarray) -> gs.Variable:
    """The pad values ``x[..., index]`` on ``axis``: a Slice of the inputs they copy, ordered by
    a strip-sized 0/1 selection."""
    low, high = int(index.min()), int(index.max()) + 1
    strip = build.slice(x, axis, low, high, _sized(shape, axis, high - low))
    select = gather_matrix(index - low, high - low)  # [len(index), k]
    if axis == 1:
        return build.op("Conv", [strip, build.const("select", select[:, :, None, None])],
                        _sized(shape, 1, len(index)), kernel_shape=[1, 1])
    if axis == 3:
        return build.op("MatMul", [strip, build.const("select", select.T.copy())],
                        _sized(shape, 3, len(index)))
    turned = _sized(shape, 2, high - low)
    turned[2], turned[3] = turned[3], turned[2]
    strip = build.op("Transpose", [strip], turned, perm=[0, 1, 3, 2])
    turned[3] = len(index)
    strip = build.op("MatMul", [strip, build.const("select", select.T.copy())], turned)
    return build.op("Transpose", [strip], _sized(shape, 2, len(index)), perm=[0, 1, 3, 2])


def _sized(shape: Sequence[int], axis: int, size: int) -> List[int]:
    out = list(shape)
    out[axis] = size
    return out
