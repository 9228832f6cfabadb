"""The constraint vocabulary that rule files refer to by name.

A check takes the node its constraint is about (its ``role``), the constraint's ``args`` and the
graph (read-only), and returns None when
the node satisfies it, or a dict of details that fill the ``{placeholders}`` of the rule's reason.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (activation_inputs, attr, const_value, conv_pads, dtype_name, is_const,
                      pad_amounts, pad_value, present, sole_consumer, static_shape, squeeze_axes)
from mrvl_convert.core.pooling import pool_out_size
from mrvl_convert.rules import checks_shape
from mrvl_convert.rules.batch_axis import chunk_refusal
from mrvl_convert.rules.checks_shape import model_batch
from mrvl_convert.rules.qnn_bias import INT8_CHECKS
from mrvl_convert.rules.checks_elementwise import ELEMENTWISE_CHECKS, fp16_range_detail
from mrvl_convert.rules.checks_transformer import TRANSFORMER_CHECKS
from mrvl_convert.rules.checks_l2 import L2_CHECKS

Details = Optional[Dict[str, Any]]
Check = Callable[[gs.Node, Mapping[str, Any], gs.Graph], Details]


def _tensors(node: gs.Node):
    """The tensors a layer computes on: its activations in and its main output (not Indices)."""
    return activation_inputs(node) + [node.outputs[0]]


def check_float32(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    for tensor in _tensors(node):
        if dtype_name(tensor) != "float32":
            return {"dtype": dtype_name(tensor), "tensor": tensor.name}
    return None


def check_rank(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    tensor = node.inputs[0]
    rank = len(tensor.shape) if tensor.shape is not None else "unknown"
    return None if rank == args["rank"] else {"rank": rank, "tensor": tensor.name}


def check_static_shape(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    for tensor in _tensors(node):
        if static_shape(tensor) is None:
            return {"tensor": tensor.name}
    return None


def check_reads_activation(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A layer computes on an activation: a node whose inputs are all constant is constant
    folding's to compute (or the CPU's, where folding it would cost too much), not a layer's
    (a QuantizeLinear of a reshaped weight, a MatMul of two constants)."""
    return None if activation_inputs(node) else {"op": node.op}


def check_batch_at_most(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """The batch is axis 0 of the first activation the node reads: of ``[N, C, H, W]``, of a
    token tensor ``[B, T, C]`` or ``[B, heads, T, d]`` alike, never of a constant operand (an
    exporter's ``Add(bias, x)`` puts the bias first: its length is no batch). Against an
    accelerator limit (``max`` names one of the rule file's ``limits``: the device's batch), at
    most the model's batch (``model_batch``: heads folded into axis 0 are no batch of the
    device's; a batchless ``[frames, bins]`` input lifted to ``[1, ...]`` is batch 1); against
    a layer's own number (``max: 1``), the tensor's axis 0 as it is. Above either limit, a
    per-sample node of the model's batch passes (its region runs in chunks:
    ``batch_axis.batch_runs``); else ``across`` names the op that reads across the samples."""
    acts = activation_inputs(node)
    shape = (static_shape(acts[0]) if acts else None) or []
    batch = shape[0] if shape else 1
    if batch <= args["max"]:
        return None  # so is the smaller of it and the model's batch: spare walking the graph
    batch = min(batch, model_batch(graph)) if "limit" in args else batch
    refusal = None if batch <= args["max"] else chunk_refusal(node, shape[0], model_batch(graph))
    return None if refusal is None else {"batch": batch, "max": args["max"], "across": (
        f", and {refusal}, so its samples cannot run in chunks of {args['max']}")}


def check_const_input(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    tensor = present(node, int(args["index"]))
    if tensor is None or is_const(tensor):
        return None
    return {"tensor": tensor.name}


def check_attr_in(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    value = attr(node, args["name"], args.get("default"))
    return None if value in args["values"] else {"value": value}


def check_single_output(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    outputs = {t.name for t in graph.outputs}
    extra = [t for t in node.outputs[1:] if t.outputs or t.name in outputs]
    return {"tensor": extra[0].name} if extra else None


def check_conv_groups(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Grouped convolution maps to Conv2D when the groups split the input and output channels
    evenly (ordinary, depthwise, or block-diagonal for 1 < groups < channels)."""
    groups = int(attr(node, "group", 1))
    in_channels = (static_shape(node.inputs[0]) or [0, 0])[1]
    weights = present(node, 1)
    out_channels = const_value(weights).shape[0] if is_const(weights) else 0
    if groups >= 1 and in_channels % groups == 0 and out_channels % groups == 0:
        return None
    return {"groups": groups, "in_channels": in_channels, "out_channels": out_channels}


def check_channel_affine(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A standalone BatchNormalization (inference, constant statistics) or a Mul by a constant
    that varies only along the channel axis of a 4-D tensor, within fp16 (the weight)."""
    if node.op == "BatchNormalization":
        return check_bn_foldable(node, args, graph)
    return check_per_channel_const(node, args, graph) or fp16_range_detail(_other_operand(node))


def check_channel_shuffle(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Reshape [N, C, H, W] -> [N, g1, .., gk, H, W], Transpose permuting only the g axes,
    Reshape back to [N, C, H, W]: a permutation of the channels."""
    issue = checks_shape.channel_shuffle_issue(node, sole_consumer)
    return None if issue is None else {"detail": issue}


def check_pad_foldable(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    if attr(node, "mode", "constant") != "constant":
        return {"detail": f"mode is {attr(node, 'mode')!r}, only constant padding folds"}
    pads = pad_amounts(node)
    if pads is None:
        return {"detail": "the pads are computed at run time"}
    if len(node.inputs) > 3 and present(node, 3) is not None:
        return {"detail": "the Pad has an axes input"}
    value = pad_value(node)
    if value != 0.0:
        return {"detail": f"the pad value is {value}, a Conv pads with 0"}
    if len(pads) != 8 or any(pads[i] for i in (0, 1, 4, 5)):
        return {"detail": f"pads {pads} touch the batch or channel axis"}
    if any(p < 0 for p in pads):
        return {"detail": f"pads {pads} crop (negative)"}
    return None


def _broadcast_axes(const: np.ndarray, out_rank: int):
    """Axes of the output along which the constant varies (numpy broadcasting)."""
    shape = [1] * (out_rank - const.ndim) + list(const.shape)
    return [axis for axis, size in enumerate(shape) if size != 1]


def _other_operand(node: gs.Node):
    consts = [t for t in node.inputs if is_const(t)]
    return consts[0] if len(consts) == 1 and len(node.inputs) == 2 else None


def check_per_channel_const(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    const = _other_operand(node)
    if const is None:
        return {"detail": "neither operand or both operands are constant"}
    out = static_shape(node.outputs[0]) or []
    value = const_value(const)
    if value.ndim > len(out) or static_shape(node.inputs[0] if node.inputs[1] is const
                                            else node.inputs[1]) != out:
        return {"detail": f"the constant {list(value.shape)} changes the shape {out}"}
    varying = _broadcast_axes(value, len(out))
    if any(axis != 1 for axis in varying):
        return {"detail": f"the constant {list(value.shape)} varies along axes {varying}, "
                          "not only the channel axis 1"}
    return None


def check_bn_foldable(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    if check_single_output(node, args, graph) is not None:
        return {"detail": "running statistics outputs are used (training mode)"}
    if int(attr(node, "training_mode", 0)):
        return {"detail": "training_mode=1"}
    for index, name in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
        tensor = present(node, index)
        if tensor is None or not is_const(tensor):
            return {"detail": f"{name} is not constant"}
    return None


def check_fc_weights(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """An activation times a constant 2-D weight (a product of two constants is folding's
    business, or the CPU's when folding it costs too much)."""
    if is_const(node.inputs[0]):
        return {"detail": "input 0 is a constant: an FC multiplies an activation"}
    weights = present(node, 1)
    if weights is None or not is_const(weights):
        return {"detail": "the weights are not constant"}
    if const_value(weights).ndim != 2:
        return {"detail": f"the weights have rank {const_value(weights).ndim}, not 2"}
    if node.op == "Gemm":
        if int(attr(node, "transA", 0)):
            return {"detail": "Gemm with transA=1 is not supported"}
        bias = present(node, 2)
        if bias is not None and not is_const(bias):
            return {"detail": "the Gemm's C input is not constant"}
        if bias is not None:
            out = static_shape(node.outputs[0]) or [0, 0]
            varying = _broadcast_axes(const_value(bias), 2)
            if any(axis != 1 for axis in varying):
                return {"detail": f"the Gemm's C {list(const_value(bias).shape)} is not a bias "
                                  f"vector over {out[1]} outputs"}
    return None


def check_fc_bias(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A constant that varies along the last axis only, over a 2-D ``[N, O]`` or a 3-D token
    ``[B, T, O]`` output (an FC over the last axis, either operand order)."""
    const = _other_operand(node)
    if const is None:
        return {"detail": "neither operand or both operands are constant"}
    value = const_value(const)
    out = static_shape(node.outputs[0]) or []
    rank = len(out)
    if rank not in (2, 3) or value.ndim > rank or \
            _broadcast_axes(value, rank) not in ([], [rank - 1]):
        return {"detail": f"constant of shape {list(value.shape)} over output {out}"}
    activation = [t for t in node.inputs if t is not const][0]
    if static_shape(activation) != out:
        return {"detail": "the constant broadcasts the activation to a larger shape"}
    return None


def check_same_shape_activations(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    acts = activation_inputs(node)
    if len(acts) != 2 or len(node.inputs) != 2:
        return {"detail": "Sum2D adds two activations; this Add has "
                          f"{len(acts)} non-constant operand(s)"}
    a, b = (static_shape(t) for t in acts)
    if a != b:
        return {"detail": f"operands {a} and {b} differ in shape (broadcasting add)"}
    return None


def check_const_operand(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    const = _other_operand(node)
    if const is None:
        return {"detail": "an Add with a constant operand needs exactly one constant input"}
    activation = [t for t in node.inputs if t is not const][0]
    if static_shape(activation) != static_shape(node.outputs[0]):
        return {"detail": f"the constant {list(const_value(const).shape)} broadcasts the "
                          "activation to a larger shape"}
    return fp16_range_detail(const)  # the Sum2D layer holds it in fp16


def check_no_const_inputs(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    consts = [t for t in node.inputs if is_const(t)]
    return {"tensor": consts[0].name} if consts else None


def check_channel_axis(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    rank = len(node.outputs[0].shape or [])
    axis = int(attr(node, "axis", 1))
    if axis < 0:
        axis += rank
    return None if axis == 1 and rank in (2, 4) else {"axis": axis, "rank": rank}


def check_keeps_batch(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Axis 0 is kept, or the model's batch is 1 (``model_batch``): then every tensor is one
    sample, and a Reshape folding attention heads into axis 0 (``[1, H, T, d] -> [H, T, d]``)
    or back only relabels it."""
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if not src or not dst or (src[0] != dst[0] and model_batch(graph) != 1):
        return {"detail": f"the batch dimension is not kept ({src} -> {dst})"}
    if node.op == "Flatten" and len(dst) != 2:
        return {"detail": "Flatten does not produce [batch, features]"}
    if node.op == "Squeeze" and squeeze_axes(node) is None:
        return {"detail": "the squeezed axes are computed at run time"}
    return None


def check_pool_shape(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """The model's output size must be the one the layer computes (``_pooling.py``): a Nodes-JSON
    stating another would be refused by the simulator, and the layers after the pool were shaped
    for the stated size."""
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if src is None or dst is None or len(src) != 4 or len(dst) != 4:
        return None  # the rank and static_shape constraints name these
    kernel = [int(k) for k in attr(node, "kernel_shape", [1, 1])]
    strides = [int(s) for s in attr(node, "strides", [1, 1])]
    dilations = [int(d) for d in attr(node, "dilations", [1, 1])]
    pads = conv_pads(node, src, kernel, strides, dilations, dst)
    ceil_mode = bool(attr(node, "ceil_mode", 0))
    computed = [pool_out_size(src[2 + a], pads[a], pads[2 + a], kernel[a], strides[a],
                              dilations[a], ceil_mode) for a in range(2)]
    if computed == dst[2:]:
        return None
    why = (" (ceil mode: onnx's shape inference counts a last window that starts past the input, "
           "which onnxruntime 1.21+ and PyTorch drop)") if ceil_mode else ""
    return {"declared": dst[2:], "computed": computed, "why": why}


# The largest stride, pad, dilation or window the checks let through to the accelerator: more
# than any image side, and small enough that the simulator's buffers stay finite.
MAX_SPATIAL = 65535


def check_conv_weights(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """The weight and bias agree with the input and the attributes, as the layer computes them
    (a model onnxruntime would refuse must not reach the simulator)."""
    src, weights = static_shape(node.inputs[0]), present(node, 1)
    if src is None or len(src) != 4 or weights is None or not is_const(weights):
        return None  # the rank, static_shape and const_input constraints name these
    w_shape = list(const_value(weights).shape)
    if len(w_shape) != 4:
        return {"detail": f"the weight {weights.name} has shape {w_shape}, not rank 4 (OIHW)"}
    group = int(attr(node, "group", 1))
    out_channels, in_per_group, kh, kw = w_shape
    if group < 1 or src[1] % group or out_channels % group:
        return {"detail": f"group={group} does not divide the {src[1]} input and "
                          f"{out_channels} output channels"}
    if in_per_group * group != src[1]:
        return {"detail": f"the weight {weights.name} {w_shape} takes {in_per_group} x "
                          f"group {group} = {in_per_group * group} input channels, the input has "
                          f"{src[1]}"}
    kernel = attr(node, "kernel_shape", None)
    if kernel is not None and [int(k) for k in kernel] != [kh, kw]:
        return {"detail": f"kernel_shape={list(kernel)} contradicts the weight's {[kh, kw]}"}
    bias = present(node, 2)
    if bias is not None and is_const(bias) and list(const_value(bias).shape) != [out_channels]:
        return {"detail": f"the bias {bias.name} has shape {list(const_value(bias).shape)}, not "
                          f"[{out_channels}] (one per output channel)"}
    return None


def check_spatial_bounds(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Window, strides, pads and dilations within [0 or 1, MAX_SPATIAL] and the window inside
    the padded input."""
    values = {name: [int(v) for v in attr(node, name, []) or []]
              for name in ("kernel_shape", "strides", "dilations", "pads")}
    for name, items in values.items():
        low = 0 if name == "pads" else 1
        if any(not low <= v <= MAX_SPATIAL for v in items):
            return {"detail": f"{name}={items} is outside [{low}, {MAX_SPATIAL}]"}
    src = static_shape(node.inputs[0])
    kernel = values["kernel_shape"] or _weight_window(node)
    if src is None or len(src) != 4 or len(kernel) != 2:
        return None
    dilations = values["dilations"] or [1, 1]
    pads = values["pads"] if len(values["pads"]) == 4 else [0, 0, 0, 0]
    for axis in range(2):
        window = (kernel[axis] - 1) * dilations[axis] + 1
        room = src[2 + axis] + pads[axis] + pads[2 + axis]
        if window > room:
            return {"detail": f"the window ({window} with dilation) is larger than the padded "
                              f"input ({room}) along axis {2 + axis}"}
    return None


def _weight_window(node: gs.Node) -> list:
    weights = present(node, 1) if node.op == "Conv" else None
    if weights is None or not is_const(weights) or const_value(weights).ndim != 4:
        return []
    return list(const_value(weights).shape[2:])


CHECKS: Dict[str, Check] = {
    "float32": check_float32,
    "rank": check_rank,
    "static_shape": check_static_shape,
    "batch_at_most": check_batch_at_most,
    "reads_activation": check_reads_activation,
    "const_input": check_const_input,
    "attr_in": check_attr_in,
    "single_output": check_single_output,
    "conv_groups": check_conv_groups,
    "channel_affine": check_channel_affine,
    "channel_shuffle": check_channel_shuffle,
    "pad_foldable": check_pad_foldable,
    "per_channel_const": check_per_channel_const,
    "bn_foldable": check_bn_foldable,
    "fc_weights": check_fc_weights,
    "fc_bias": check_fc_bias,
    "same_shape_activations": check_same_shape_activations,
    "const_operand": check_const_operand,
    "no_const_inputs": check_no_const_inputs,
    "channel_axis": check_channel_axis,
    "keeps_batch": check_keeps_batch,
    "pool_shape": check_pool_shape,
    "conv_weights": check_conv_weights,
    "spatial_bounds": check_spatial_bounds,
    "resize_nearest": checks_shape.check_resize_nearest,
    "split_static": checks_shape.check_split_static,
    "slice_static": checks_shape.check_slice_static,
    "reduce_mean_axis": checks_shape.check_reduce_mean_axis,
    "reduce_max_axis": checks_shape.check_reduce_max_axis,
    "reduce_global_pool": checks_shape.check_reduce_global_pool,
    "transpose_rank": checks_shape.check_transpose_rank,
    "conv_transpose": checks_shape.check_conv_transpose,
    "batch_matmul": checks_shape.check_batch_matmul,
    "ranks_2_to_4": checks_shape.check_ranks_2_to_4,
    **INT8_CHECKS,
    **ELEMENTWISE_CHECKS,
    **TRANSFORMER_CHECKS,
    **L2_CHECKS,
}
