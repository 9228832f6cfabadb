"""Per-op rewrites of ``sequence_lift.py``: one node whose tensors ``[T, ...]`` become
``[1, T, ...]`` (a unit batch in front of the frame axis).

Every axis the node names moves one place right (a negative axis counts from the end and stays);
a constant shape gains its leading 1; constants that broadcast from the right need nothing, as
ONNX aligns shapes from the last axis. ``liftable`` says whether a node has such a form here,
``lift`` rewrites it in place, ``keeps_frames`` whether axis 0 of its output is still the frame
axis (a reduction over the frames, or a Squeeze of them, ends a region).

Exact: the lifted node computes the same elements in the same order; the one bound, a reduction
or MatMul that onnxruntime may add in another order on the longer shape, is in
``sequence_lift.py``.
"""
from __future__ import annotations

from typing import List, Optional, Set

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, const_value, is_const, outer_inputs, present,
                                     static_shape)
from mrvl_convert.frontend.canonical_forms import Names
from mrvl_convert.frontend.pad_sinking import set_pads
from mrvl_convert.frontend.rank_ops import ELEMENTWISE

_PLAIN = ELEMENTWISE | {"Cast", "Identity"}
_REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                     "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"})
_AXIS = frozenset({"Softmax", "LogSoftmax", "Concat", "Split", "LayerNormalization"})
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
OPS = _PLAIN | _REDUCE | _AXIS | _QDQ | {"MatMul", "Slice", "Pad", "Unsqueeze", "Squeeze",
                                         "Reshape", "Flatten", "Transpose"}


def kept_names(graph: gs.Graph) -> Set[str]:
    """A model output, or a tensor an If/Loop body reads (unlisted in its readers): a rewrite
    keeps its producer."""
    return {t.name for t in graph.outputs} | {
        t.name for n in graph.nodes for t in outer_inputs(n)}


def _shifted(axis: int) -> int:
    return axis + 1 if axis >= 0 else axis


def _int_list(tensor: Optional[gs.Tensor]) -> Optional[List[int]]:
    if tensor is None:
        return None
    return [int(v) for v in const_value(tensor).reshape(-1)] if is_const(tensor) else None


def _axes_input(node: gs.Node, index: int) -> Optional[List[int]]:
    """The node's constant axes (attribute before the opsets that made it an input), [] when
    absent, None when computed at run time."""
    if "axes" in node.attrs:
        return [int(a) for a in attr(node, "axes")]
    tensor = present(node, index)
    return [] if tensor is None else _int_list(tensor)


def squeezed_axes(node: gs.Node) -> Optional[List[int]]:
    """A Squeeze's axes normalised on its input (every unit axis when none are given)."""
    shape, axes = static_shape(node.inputs[0]), _axes_input(node, 1)
    if shape is None or axes is None:
        return None
    return sorted({a % len(shape) for a in axes} if axes else
                  {i for i, d in enumerate(shape) if d == 1})


def unsqueezed_axes(node: gs.Node) -> Optional[List[int]]:
    """An Unsqueeze's axes normalised on its output."""
    shape, axes = static_shape(node.outputs[0]), _axes_input(node, 1)
    if shape is None or not axes:
        return None
    return sorted({a % len(shape) for a in axes})


def reduced_axes(node: gs.Node) -> Optional[List[int]]:
    """A reduction's explicit axes, normalised; None when there are none (all of them, or none
    with noop_with_empty_axes: a form whose rank the lift would change) or they are computed."""
    shape, axes = static_shape(node.inputs[0]), _axes_input(node, 1)
    if shape is None or not axes:
        return None
    return sorted({a % len(shape) for a in axes})


def liftable(node: gs.Node, opset: int) -> bool:
    """The node has a ``[1, T, ...]`` form here (its other inputs constant where it needs)."""
    op = node.op
    if op in _PLAIN:  # a constant of a higher rank would put its axes before the frames
        ranks = [len(static_shape(t) or ()) for t in node.inputs if t.name]
        acts = [r for t, r in zip((t for t in node.inputs if t.name), ranks) if not is_const(t)]
        return bool(acts) and max(ranks) <= max(acts)
    if op in _QDQ:  # one scale and zero point per tensor: elementwise, no axis to move
        return all(is_const(t) and np.asarray(const_value(t)).ndim == 0
                   for t in node.inputs[1:] if t.name)
    if op in _AXIS:
        return op != "Split" or present(node, 1) is None or is_const(node.inputs[1])
    if op == "MatMul":
        first = static_shape(node.inputs[0])
        return first is not None and len(first) >= 2 and (
            len(static_shape(node.inputs[1]) or [0, 0, 0]) <= 2)
    if op == "Slice":
        return opset < 10 or all(is_const(t) for t in node.inputs[1:] if t.name)
    if op == "Pad":
        return "pads" in node.attrs or all(is_const(t) for t in node.inputs[1:] if t.name)
    if op == "Unsqueeze":
        axes = unsqueezed_axes(node)
        return axes is not None and 0 not in axes
    if op == "Squeeze":
        axes = squeezed_axes(node)
        return axes is not None and 0 not in axes
    if op == "Reshape":
        src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
        return bool(src and dst) and src[0] == dst[0] and is_const(node.inputs[1])
    if op == "Flatten":  # [T, ...] -> [T, features]: the frames stay axis 0
        return flattens_features(node)
    if op == "Transpose":  # no perm reverses the axes, the frames last
        return "perm" in node.attrs and int(attr(node, "perm")[0]) == 0
    if op in _REDUCE:
        return reduced_axes(node) is not None
    return False


def flattens_features(node: gs.Node) -> bool:
    """A Flatten at axis 1 (of static shape): ``[T, ...] -> [T, features]``."""
    shape = static_shape(node.inputs[0])
    return node.op == "Flatten" and bool(shape) and static_shape(node.outputs[0]) is not None \
        and int(attr(node, "axis", 1)) % len(shape) == 1


def keeps_frames(node: gs.Node) -> bool:
    """Axis 0 of the node's output is still the frame axis (a reduction over it ends there)."""
    return node.op not in _REDUCE or 0 not in (reduced_axes(node) or [0])


def mixes_frames(node: gs.Node) -> bool:
    """The node reads across frames (a window or pad along axis 0, a reduction or join over it):
    axis 0 is a sequence axis, not a batch of independent samples."""
    if node.op in _REDUCE:
        return 0 in (reduced_axes(node) or [])
    if node.op == "Concat":
        return int(attr(node, "axis", 0)) % len(static_shape(node.outputs[0]) or [1]) == 0
    if node.op == "Slice":
        return 0 in _slice_axes(node)
    if node.op == "Pad":
        pads = pad_list(node)
        return bool(pads) and (pads[0] != 0 or pads[len(pads) // 2] != 0)
    return False


def lift(node: gs.Node, opset: int, names: Names) -> None:
    """Rewrite the node's axes and constant shapes for its ``[1, T, ...]`` tensors (its
    activations are rewired by the caller)."""
    op = node.op
    if op in _AXIS:
        default = 0 if op == "Concat" else (-1 if op != "Split" else 0)
        if op in ("Softmax", "LogSoftmax") and opset < 13:
            default = 1
        node.attrs["axis"] = _shifted(int(attr(node, "axis", default)))
        if op == "Concat":
            _const_operands(node, names)
    elif op == "Slice":
        _slice(node, opset, names)
    elif op == "Pad":
        _pad(node, names)
    elif (op in ("Unsqueeze", "Squeeze") or op in _REDUCE) and not _squeezes_nothing(node):
        axes = (unsqueezed_axes(node) if op == "Unsqueeze" else
                squeezed_axes(node) if op == "Squeeze" else reduced_axes(node))
        _set_axes(node, [a + 1 for a in axes], opset, names)
    elif op in ("Reshape", "Flatten", "Squeeze"):  # a Flatten of [1, T, ...] at 2 would make
        # it 2-D; a Squeeze of no unit axis, given axes [], would squeeze the new unit batch
        node.op = "Reshape"
        node.attrs.clear()
        if len(node.inputs) < 2:
            node.inputs.append(gs.Variable.empty())
        shape = [1] + static_shape(node.outputs[0])
        node.inputs[1] = gs.Constant(names.fresh(f"{node.name}_shape_seq"),
                                     np.array(shape, np.int64))
    elif op == "Transpose":
        node.attrs["perm"] = [0] + [int(p) + 1 for p in attr(node, "perm")]


def _squeezes_nothing(node: gs.Node) -> bool:
    """A Squeeze of an input without unit axes: a copy. Lifted, its axes would be an empty list,
    which onnxruntime reads as "every unit axis" (the new batch too) and shape inference as
    "none", so it is written as the Reshape it is."""
    return node.op == "Squeeze" and squeezed_axes(node) == []


def _set_axes(node: gs.Node, axes: List[int], opset: int, names: Names) -> None:
    # An attribute before opset 13 (18 for the reductions but ReduceSum), an input since.
    as_input = 13 if node.op in ("Unsqueeze", "Squeeze", "ReduceSum") else 18
    if "axes" in node.attrs or opset < as_input:
        node.attrs["axes"] = axes
        return
    _set_input(node, 1, axes, names)


def _set_input(node: gs.Node, index: int, values: List[int], names: Names) -> None:
    """The node's (optional) input ``index`` becomes the constant ``values``."""
    constant = gs.Constant(names.fresh(f"{node.name}_axes_seq"), np.array(values, np.int64))
    while len(node.inputs) <= index:
        node.inputs.append(gs.Variable.empty())
    node.inputs[index] = constant


def _const_operands(node: gs.Node, names: Names) -> None:
    for index, tensor in enumerate(node.inputs):
        if is_const(tensor):
            value = const_value(tensor)
            node.inputs[index] = gs.Constant(names.fresh(f"{tensor.name}_seq"), value[None])


def _slice_axes(node: gs.Node) -> List[int]:
    rank = len(static_shape(node.inputs[0]) or [1])
    if "starts" in node.attrs:
        count = len(attr(node, "starts"))
        axes = attr(node, "axes", list(range(count)))
    else:
        count = len(_int_list(node.inputs[1]) or [])
        axes = _int_list(present(node, 3)) or list(range(count))
    return [int(a) % rank for a in axes]


def _slice(node: gs.Node, opset: int, names: Names) -> None:
    axes = [a + 1 for a in _slice_axes(node)]
    if opset < 10 or "starts" in node.attrs:
        node.attrs["axes"] = axes
        return
    _set_input(node, 3, axes, names)


def pad_list(node: gs.Node) -> List[int]:
    """The pads over every axis (begins then ends), an ``axes`` input expanded."""
    rank = len(static_shape(node.inputs[0]) or [])
    if "pads" in node.attrs:
        return [int(p) for p in attr(node, "pads")]
    pads = _int_list(node.inputs[1]) or []
    axes = _int_list(present(node, 3))
    if axes is None:
        return pads
    begin, end = [0] * rank, [0] * rank
    for k, axis in enumerate(axes):
        begin[axis % rank], end[axis % rank] = pads[k], pads[len(axes) + k]
    return begin + end


def _pad(node: gs.Node, names: Names) -> None:
    pads = pad_list(node)
    half = len(pads) // 2
    set_pads(node, [0] + pads[:half] + [0] + pads[half:], names)
