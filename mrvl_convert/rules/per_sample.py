"""Whether a node computes each sample on its own: no output element of sample ``i`` (axis 0)
reads an input element of another sample. Such a node gives the same numbers run on the whole
batch or on any split of axis 0 into chunks, concatenated (``batch_axis.batch_runs``).

The rule, per node, given the batch ``N`` (axis 0 of the tensors it reads as a batch):

- every activation it reads and every tensor it writes has ``N`` as its axis 0 (a lower-rank
  activation broadcast over the samples, or an output of another length, is not per-sample);
- a constant operand of an elementwise op does not vary along axis 0 (rank below the output's,
  or axis 0 of 1): a constant with one row per sample would have to be cut with the chunks. A
  weight is a constant or a tensor computed from constants only (an int8 weight's
  DequantizeLinear, ``is_weight``): one value for every sample, never a batch;
- the op is one of ``_PER_SAMPLE`` (its semantics never cross axis 0 when the shapes above
  hold), or one of ``_AXIS_CHECKS`` whose axis attribute or constant input keeps off axis 0:
  Transpose (perm[0] == 0), Concat/Split/Softmax/Gather/LayerNormalization (axis != 0),
  reductions (axis 0 not reduced), Slice (axis 0 whole, step 1), Pad (none on axis 0),
  Quantize/DequantizeLinear (no scale per sample), MatMul (the second operand a weight of rank
  <= 2 or a batch of the same ``N``), Gemm (A not transposed, a bias row not per sample). Any
  other op (GatherND, CumSum, Einsum, LSTM, ...) is taken as reading across axis 0.

``reads_across_batch`` returns None for a per-sample node, else why not, naming the op: the
reason a batch the device cannot take keeps.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (activation_inputs, attr, const_value, is_const,
                                     pad_amounts, present, static_shape)

# Ops that never cross axis 0 when every tensor they read or write has the batch as axis 0.
_PER_SAMPLE = frozenset({
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "LpPool", "BatchNormalization", "InstanceNormalization", "LRN", "Relu", "LeakyRelu", "PRelu",
    "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Celu", "Gelu", "Erf", "Exp",
    "Log", "Sqrt", "Abs", "Neg", "Reciprocal", "Softplus", "Softsign", "Clip", "Cast",
    "Identity", "Dropout", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Mish", "Not", "Add",
    "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Where", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "Resize", "Upsample",
    "Tile", "Expand", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "DepthToSpace",
    "SpaceToDepth", "IsNaN", "IsInf", "ThresholdedRelu",
    "Shrink",
})
# Elementwise ops whose constant operands broadcast against the samples.
_BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Where", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "PRelu",
})
_REDUCTIONS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",
               "ArgMin")


def reads_across_batch(node: gs.Node, batch: int) -> Optional[str]:
    """None when ``node`` computes each of its ``batch`` samples (axis 0) on its own (module
    docstring), else why not, naming the op and the node."""
    check = _AXIS_CHECKS.get(node.op)
    if check is not None:
        issue = check(node)
    elif node.op in _PER_SAMPLE:
        issue = _constant_rows(node, batch) if node.op in _BROADCASTING else None
    else:
        issue = "is not known to keep the samples apart"
    issue = issue or _shape_issue(node, batch)
    return f"{node.op} {node.name!r} {issue}" if issue else None


def _shape_issue(node: gs.Node, batch: int) -> Optional[str]:
    reads = _batch_operands(node)
    for tensor in reads + [t for t in node.outputs if t.outputs or t.name]:
        shape = static_shape(tensor)
        if not shape or shape[0] != batch:
            return (f"has {tensor.name!r} of shape {shape}, whose axis 0 is not the batch "
                    f"{batch}")
    return None


def is_weight(tensor: gs.Tensor, depth: int = 4) -> bool:
    """A constant, or a tensor computed from constants only (an int8 weight's
    DequantizeLinear, a Cast of a constant): one value for every sample."""
    if is_const(tensor):
        return True
    if depth == 0 or not tensor.inputs:
        return False
    return all(is_weight(t, depth - 1) for t in tensor.inputs[0].inputs if t.name or is_const(t))


def _batch_operands(node: gs.Node) -> List[gs.Tensor]:
    """The activations read as batches: a MatMul's second operand of rank <= 2 is a weight-like
    matrix whose axis 0 is contracted (``_matmul`` names it), not a batch."""
    acts = [t for t in activation_inputs(node) if not is_weight(t)]
    if node.op == "MatMul" and len(node.inputs) == 2 and node.inputs[1] in acts:
        second = static_shape(node.inputs[1])
        if second is not None and len(second) <= 2:
            return [t for t in acts if t is not node.inputs[1]]
    return acts


def _constant_rows(node: gs.Node, batch: int) -> Optional[str]:
    """A constant operand with one row per sample (rank of the output, axis 0 of ``batch``)."""
    out = static_shape(node.outputs[0]) if node.outputs else None
    for tensor in node.inputs:
        if not is_weight(tensor) or out is None:
            continue
        shape = static_shape(tensor) or []
        if len(shape) == len(out) and shape and shape[0] != 1:
            return f"reads the constant {tensor.name!r} ({shape}) that differs per sample"
    return None


def _axis_off_zero(name: str, default: int) -> Callable[[gs.Node], Optional[str]]:
    def check(node: gs.Node) -> Optional[str]:
        axis = attr(node, name, default)
        rank = len(static_shape(node.inputs[0]) or [0])
        if axis is None or (rank and int(axis) % rank == 0):
            return f"works along axis 0 ({name}={axis})"
        return None
    return check


def _transpose(node: gs.Node) -> Optional[str]:
    perm = attr(node, "perm")
    if perm is None or int(perm[0]) != 0:
        return f"moves axis 0 (perm {perm})"
    return None


def _reduction(node: gs.Node) -> Optional[str]:
    rank = len(static_shape(node.inputs[0]) or [])
    if node.op in ("ArgMax", "ArgMin"):
        axes: Optional[Sequence[int]] = [int(attr(node, "axis", 0))]
    elif "axes" in node.attrs:
        axes = [int(a) for a in attr(node, "axes")]
    else:
        given = present(node, 1)
        axes = None if given is not None and not is_const(given) else (
            [] if given is None else [int(a) for a in const_value(given).reshape(-1)])
    if axes is None:
        return "reduces axes computed at run time"
    if not axes and not attr(node, "noop_with_empty_axes", 0):
        return "reduces every axis, the batch too"
    if rank and any(a % rank == 0 for a in axes):
        return f"reduces axis 0 (axes {list(axes)})"
    return None


def _slice(node: gs.Node) -> Optional[str]:
    if "starts" in node.attrs:  # opset < 10: the ranges are attributes
        starts, ends = attr(node, "starts"), attr(node, "ends")
        axes, steps = attr(node, "axes", list(range(len(starts)))), [1] * len(starts)
    else:
        parts = [present(node, i) for i in range(1, 5)]
        if any(p is not None and not is_const(p) for p in parts):
            return "slices ranges computed at run time"
        starts, ends = (const_value(p).reshape(-1).tolist() for p in parts[:2])
        axes = const_value(parts[2]).reshape(-1).tolist() if parts[2] is not None \
            else list(range(len(starts)))
        steps = const_value(parts[3]).reshape(-1).tolist() if parts[3] is not None \
            else [1] * len(starts)
    rank = len(static_shape(node.inputs[0]) or [1])
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if int(axis) % rank == 0 and (int(start) != 0 or int(step) != 1):
            return f"slices axis 0 (start {start}, step {step})"
    return None


def _pad(node: gs.Node) -> Optional[str]:
    pads = pad_amounts(node)
    rank = len(static_shape(node.inputs[0]) or [])
    if pads is None:
        return "pads by amounts computed at run time"
    if rank and len(pads) == 2 * rank and (pads[0] or pads[rank]):
        return f"pads axis 0 (pads {pads})"
    return None


def _per_axis_scale(node: gs.Node) -> Optional[str]:
    scale = present(node, 1)
    rank = len(static_shape(node.inputs[0]) or [])
    if scale is not None and is_const(scale) and const_value(scale).size > 1 and rank \
            and int(attr(node, "axis", 1)) % rank == 0:
        return "scales each sample by its own factor (axis 0)"
    return None


def _matmul(node: gs.Node) -> Optional[str]:
    second = node.inputs[1]
    shape = static_shape(second) or []
    if not is_weight(second) and len(shape) <= 2:
        return f"contracts the samples of {second.name!r} ({shape}) with each other"
    for operand in node.inputs[:2]:
        rows = static_shape(operand) or []
        if is_weight(operand) and len(rows) >= 3 and rows[0] != 1:
            return f"multiplies by the constant {operand.name!r} ({rows}) that differs per sample"
    return None


def _gemm(node: gs.Node) -> Optional[str]:
    if attr(node, "transA", 0) or is_weight(node.inputs[0]):
        return "reads its samples as columns (transA, or a constant A)"
    if not is_weight(node.inputs[1]):
        return "multiplies two activations: their samples meet"
    bias = present(node, 2)
    if bias is not None and is_weight(bias):
        shape = static_shape(bias) or []
        if len(shape) == 2 and shape[0] != 1:
            return f"adds the constant {bias.name!r} ({shape}) that differs per sample"
    return None


_AXIS_CHECKS: Dict[str, Callable[[gs.Node], Optional[str]]] = {
    "Transpose": _transpose, "Concat": _axis_off_zero("axis", 0),
    "Split": _axis_off_zero("axis", 0), "Softmax": _axis_off_zero("axis", -1),
    "LogSoftmax": _axis_off_zero("axis", -1), "Hardmax": _axis_off_zero("axis", -1),
    "Gather": _axis_off_zero("axis", 0), "LayerNormalization": _axis_off_zero("axis", -1),
    "Slice": _slice, "MatMul": _matmul, "Gemm": _gemm, "Pad": _pad,
    "QuantizeLinear": _per_axis_scale, "DequantizeLinear": _per_axis_scale,
    **{op: _reduction for op in _REDUCTIONS},
}
