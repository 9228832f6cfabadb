"""Per-op rewrites of ``rank_lift.py``: one node of a rank-2 or rank-3 region as its 4-D form.

A rank-3 tensor ``[N, C, L]`` is viewed as ``[N, C, 1, L]`` (a unit H inserted at axis 2), a
rank-2 ``[N, C]`` as ``[N, C, 1, 1]``. ``lifted_axis`` maps an axis of the original rank to
the 4-D one; an attribute or constant input that names axes, lists per-axis sizes or
broadcasts is rewritten so that the node computes, on the 4-D view, the same elements in the
same order as before (the unit axes get kernel 1, stride 1, no padding, no slicing).

In an int8 QDQ model a per-tensor QuantizeLinear / DequantizeLinear of an activation is
elementwise, and a weight or operand written as the DequantizeLinear of a constant (read by one
node) has its constant reshaped like a constant operand, its per-axis scale's axis moved with it.

``liftable`` says whether a node has such a form here (the op is one of ``OPS`` and every
attribute or input that decides its geometry is a constant); ``lift`` rewrites it in place.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, present
from mrvl_convert.frontend.canonical_forms import Names

# Ops computing each element from the same position of their inputs (constants broadcast).
ELEMENTWISE = frozenset({
    "Relu", "Sigmoid", "Tanh", "Elu", "Selu", "LeakyRelu", "HardSigmoid", "HardSwish",
    "Softplus", "Softsign", "Exp", "Log", "Sqrt", "Abs", "Neg", "Erf", "Reciprocal", "Floor",
    "Ceil", "Clip", "Gelu", "Mish", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"})
WINDOWED = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"})
GLOBAL = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
# ReduceSum of [N, C, L] over L has its form already (token_ops.py: an FC by ones).
REDUCE = frozenset({"ReduceMean"})
# Per-tensor quantize and dequantize of an activation (an int8 QDQ model's): elementwise.
QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
OPS = ELEMENTWISE | WINDOWED | GLOBAL | REDUCE | QDQ | {"BatchNormalization", "Concat", "Split",
                                                        "Pad", "Slice"}


def lifted_axis(axis: int, rank: int) -> int:
    """Where ``axis`` of a rank-2/3 tensor is in its 4-D view (H, and for rank 2 W, inserted)."""
    axis %= rank
    return 3 if (rank, axis) == (3, 2) else axis


def unit_axes(rank: int) -> List[int]:
    """The axes the 4-D view inserts: [2] for rank 3, [2, 3] for rank 2."""
    return [2] if rank == 3 else [2, 3]


def lifted_shape(shape: Sequence[int], rank: int) -> List[int]:
    """A shape of ``rank`` axes (or fewer, broadcasting from the right) as its 4-D view."""
    full = [1] * (rank - len(shape)) + list(shape)
    for axis in unit_axes(rank):
        full.insert(axis, 1)
    return full


def liftable(node: gs.Node, rank: int, opset: int) -> bool:
    """The node has a 4-D form here: its geometry (weights, axes, pads, starts) is constant."""
    op = node.op
    if op not in OPS or (rank == 2 and op in WINDOWED | GLOBAL) or len(node.outputs) != 1 \
            and op != "Split":
        return False
    if op in ("Conv", "ConvTranspose"):
        return is_const(node.inputs[1]) or dequantized_weight(node) is not None
    if op in QDQ:
        return not is_const(node.inputs[0]) and all(
            is_const(t) and const_value(t).size == 1 for t in node.inputs[1:] if t.name)
    if op in WINDOWED:
        return "kernel_shape" in node.attrs
    if op in REDUCE:
        return int(attr(node, "keepdims", 1)) == 1 and _reduce_axes(node) is not None
    if op == "BatchNormalization":
        return all(is_const(t) for t in node.inputs[1:5])
    if op in GLOBAL or op == "Concat":
        return True
    if op in ELEMENTWISE:
        operands = [t if is_const(t) else dequantized(t).inputs[0] for t in node.inputs
                    if is_const(t) or dequantized(t) is not None]
        return all(const_value(t).ndim <= rank for t in operands)
    if op == "Pad" and (opset < 11 and "pads" not in node.attrs
                        or opset >= 11 and present(node, 1) is None):
        return False
    if op == "Slice" and opset < 10 and "starts" not in node.attrs:
        return False
    return all(is_const(t) for t in node.inputs[1:] if t.name)


def lift(node: gs.Node, rank: int, opset: int, names: Names) -> None:
    """Rewrite ``node``'s attributes and constant inputs for the 4-D view (its activation
    inputs and outputs are swapped by the caller). BatchNormalization and the global pools
    work per channel (axis 1) on any rank: the same op on the 4-D view."""
    if node.op in WINDOWED:
        _windowed(node, names)
    elif node.op in REDUCE:
        _reduce(node, rank, names)
    elif node.op in ("Concat", "Split"):
        node.attrs["axis"] = lifted_axis(int(attr(node, "axis", 0)), rank)
        if node.op == "Concat":  # a constant piece is a tensor of the region's rank
            _broadcast_constants(node, rank, names)
    elif node.op == "Pad":
        _pad(node, rank, opset, names)
    elif node.op == "Slice":
        _slice(node, rank, opset, names)
    elif node.op in ELEMENTWISE and node.op != "Clip":  # Clip's bounds are scalars
        _broadcast_constants(node, rank, names)


def dequantized(tensor: gs.Tensor) -> Optional[gs.Node]:
    """The DequantizeLinear of a constant that writes ``tensor`` for one reader (an int8
    model's weight or operand, one dequantize per consumer as canonicalize leaves it)."""
    dq = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    if dq is None or dq.op != "DequantizeLinear" or not is_const(dq.inputs[0]) \
            or len(tensor.outputs) != 1:
        return None
    return dq


def dequantized_weight(node: gs.Node) -> Optional[gs.Node]:
    return dequantized(node.inputs[1])


def _reshape_dequantized(dq: gs.Node, rank: int, names: Names) -> None:
    """The dequantized constant takes its 4-D view's broadcast shape; a per-axis scale's
    axis moves with it."""
    weight = dq.inputs[0]
    value = const_value(weight)
    if value.ndim == 0:  # a scalar broadcasts the same on any rank
        return
    shape = lifted_shape(value.shape, rank)
    if "axis" in dq.attrs or const_value(dq.inputs[1]).size > 1:
        axis = int(dq.attrs.get("axis", 1)) % value.ndim + rank - value.ndim
        dq.attrs["axis"] = lifted_axis(axis, rank)
    dq.inputs[0] = gs.Constant(names.fresh(f"{weight.name}_4d"), value.reshape(shape))
    dq.outputs[0].shape = shape


def _windowed(node: gs.Node, names: Names) -> None:
    if node.op in ("Conv", "ConvTranspose"):
        # The weight [O, I, K] as [O, I, 1, K]: a constant, or the dequantized constant (its
        # scales per output channel, axis 0, stay where they are).
        if not is_const(node.inputs[1]):
            _reshape_dequantized(dequantized_weight(node), 3, names)
        else:
            weight = node.inputs[1]
            value = const_value(weight)
            node.inputs[1] = gs.Constant(names.fresh(f"{weight.name}_4d"),
                                         value.reshape(lifted_shape(value.shape, 3)))
    for name in ("kernel_shape", "strides", "dilations", "output_padding", "output_shape"):
        if name in node.attrs:
            unit = 0 if name == "output_padding" else 1
            node.attrs[name] = [unit] + [int(v) for v in node.attrs[name]]
    if "pads" in node.attrs:
        begin, end = node.attrs["pads"]
        node.attrs["pads"] = [0, int(begin), 0, int(end)]


def _reduce_axes(node: gs.Node) -> Optional[List[int]]:
    """The constant axes ([] when none are given), None when computed at run time."""
    if "axes" in node.attrs:
        return [int(a) for a in node.attrs["axes"]]
    tensor = present(node, 1)
    if tensor is None:
        return []
    return [int(a) for a in const_value(tensor).reshape(-1)] if is_const(tensor) else None


def _reduce(node: gs.Node, rank: int, names: Names) -> None:
    # No axes (all of them, or none with noop_with_empty_axes) means the same on the view.
    axes = _reduce_axes(node)
    if not axes:
        return
    lifted = sorted(lifted_axis(a, rank) for a in axes)
    if "axes" in node.attrs:
        node.attrs["axes"] = lifted
    else:
        node.inputs[1] = gs.Constant(names.fresh(f"{node.name}_axes_4d"),
                                     np.array(lifted, np.int64))


def _broadcast_constants(node: gs.Node, rank: int, names: Names) -> None:
    """Every constant operand but a scalar takes the 4-D view's broadcast shape (a 1-D [C]
    would otherwise align with W, not C)."""
    for index, tensor in enumerate(node.inputs):
        if not is_const(tensor):
            if dequantized(tensor) is not None:
                _reshape_dequantized(dequantized(tensor), rank, names)
            continue
        value = const_value(tensor)
        if value.ndim == 0:
            continue
        node.inputs[index] = gs.Constant(names.fresh(f"{tensor.name}_4d"),
                                         value.reshape(lifted_shape(value.shape, rank)))


def _pad(node: gs.Node, rank: int, opset: int, names: Names) -> None:
    if opset < 11:
        node.attrs["pads"] = _lift_pads(list(node.attrs["pads"]), rank, None)
        return
    pads = [int(p) for p in const_value(node.inputs[1]).reshape(-1)]
    axes_tensor = present(node, 3)
    axes = None if axes_tensor is None else [int(a) for a in const_value(axes_tensor)]
    node.inputs[1] = gs.Constant(names.fresh(f"{node.name}_pads_4d"),
                                 np.array(_lift_pads(pads, rank, axes), np.int64))
    if axes_tensor is not None:  # the pads now list every axis
        node.inputs[3] = gs.Variable.empty()


def _lift_pads(pads: List[int], rank: int, axes: Optional[List[int]]) -> List[int]:
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    half = len(axes)
    begin, end = [0] * 4, [0] * 4
    for k, axis in enumerate(axes):
        begin[lifted_axis(axis, rank)] = pads[k]
        end[lifted_axis(axis, rank)] = pads[half + k]
    return begin + end


def _slice(node: gs.Node, rank: int, opset: int, names: Names) -> None:
    if opset < 10:
        axes = list(node.attrs.get("axes", range(len(node.attrs["starts"]))))
        node.attrs["axes"] = [lifted_axis(int(a), rank) for a in axes]
        return
    count = len(const_value(node.inputs[1]).reshape(-1))
    axes_tensor = present(node, 3)
    axes = list(range(count)) if axes_tensor is None else \
        [int(a) for a in const_value(axes_tensor).reshape(-1)]
    lifted = gs.Constant(names.fresh(f"{node.name}_axes_4d"),
                         np.array([lifted_axis(a, rank) for a in axes], np.int64))
    if len(node.inputs) > 3:
        node.inputs[3] = lifted
    else:
        node.inputs.append(lifted)
