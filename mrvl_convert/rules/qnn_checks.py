"""Constraints of the int8 composites (``rules/marvell/qnn.yaml``): QDQ regions as
onnxruntime's ``quantize_static`` writes them, checked against what the newer Marvell codegen can
write: symmetric (zero point 0) int8, one scale per tensor, int32 biases in the product scale.

Each check returns None when the node satisfies it, or the details of the reason (see
``checks.py``). The codegen writes every scale as one float and no zero point
(princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``SetScaleAttr``), so a per-channel scale or a non-zero
zero point must stay on CPU rather than be cut to its first value.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (const_value, dtype_name, is_const, present, producer, scale_of,
                                     sole_consumer, static_shape)
from mrvl_convert.core.qdq_grid import integer_type, scale_size
from mrvl_convert.layers.qnn import lut
from mrvl_convert.layers.qnn.lut import CLAMP_OPS, clamp_bounds, is_relu_at, lut_issue, quantized_bounds
from mrvl_convert.rules.checks_shape import MAX_DENSE_TRANSPOSE_KERNEL, channel_shuffle_issue

Details = Optional[Dict[str, Any]]

# Relative difference allowed between a bias scale and input_scale x weight_scale: the two are
# computed in float32 in different orders by quantizers.
BIAS_SCALE_RTOL = 1e-5


def qdq_issue(node: gs.Node, dtype: str = "int8") -> Optional[str]:
    """Why a QuantizeLinear / DequantizeLinear is not symmetric per-tensor ``dtype`` (None: it is)."""
    size = scale_size(node)
    if size is None:
        return f"{node.op} {node.name!r} has a scale computed at run time"
    if size != 1:
        return (f"{node.op} {node.name!r} has a per-channel scale ({size} values); the "
                f"Marvell int8 layers take one scale per tensor")
    actual = integer_type(node)
    if actual != dtype:
        return f"{node.op} {node.name!r} is {actual}, not {dtype}"
    zero = present(node, 2)
    if zero is not None:
        if not is_const(zero):
            return f"{node.op} {node.name!r} has a zero point computed at run time"
        values = const_value(zero).reshape(-1)
        if values.size and np.any(values != 0):
            return (f"{node.op} {node.name!r} has zero point {values.tolist()[:4]}; the "
                    f"Marvell int8 layers are symmetric (zero point 0)")
    return None


def dequantized_const(tensor: gs.Tensor, dtype: str) -> Optional[str]:
    """Why ``tensor`` is not DequantizeLinear of a constant symmetric per-tensor ``dtype``."""
    node = producer(tensor)
    if node is None or node.op != "DequantizeLinear":
        return f"{tensor.name} is not dequantized from {dtype}"
    if not is_const(node.inputs[0]):
        return f"{tensor.name} is dequantized from a tensor computed at run time"
    return qdq_issue(node, dtype)


def check_int8_qdq(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A QuantizeLinear / DequantizeLinear that is symmetric per-tensor int8."""
    issue = qdq_issue(node)
    return None if issue is None else {"detail": issue}


def check_dequantizes_activation(node: gs.Node, args: Mapping[str, Any],
                                 graph: gs.Graph) -> Details:
    """A DequantizeLinear of an activation (not of a constant) that feeds input ``index`` (if
    given) of its consumer: the data input of the composite it starts."""
    if is_const(node.inputs[0]):
        return {"detail": f"it dequantizes the constant {node.inputs[0].name}"}
    index = args.get("index")
    out = node.outputs[0]
    if index is not None and any(present(c, int(index)) is not out for c in out.outputs):
        return {"detail": f"it feeds another input than input {index} of its consumer"}
    issue = qdq_issue(node)
    return None if issue is None else {"detail": issue}


def check_region_edge(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A QuantizeLinear of a float32 activation, or a DequantizeLinear of an int8 activation,
    symmetric per-tensor int8: where an int8 region starts or ends."""
    if node.op == "QuantizeLinear" and dtype_name(node.inputs[0]) != "float32":
        return {"detail": f"its input is {dtype_name(node.inputs[0])}, not float32"}
    if node.op == "DequantizeLinear" and is_const(node.inputs[0]):
        return {"detail": f"it dequantizes the constant {node.inputs[0].name}"}
    issue = qdq_issue(node)
    return None if issue is None else {"detail": issue}


def check_fused_activation(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A DequantizeLinear -> act -> QuantizeLinear after the layer's own QuantizeLinear, all
    symmetric per-tensor int8, where act is a Relu (or a clamp that is one at the output scale:
    its bounds quantize to 0 and to at least 127; the layer applies max(q, 0) in its own output
    scale and, where the act has a scale of its own, a requant follows: exact either way, as
    quantize is monotone) or any unary op a 256-entry table holds (``layers/qnn/lut.py``: the
    codegen's LUT after the layer, exact by construction)."""
    quantize = producer(node.inputs[0])
    act = sole_consumer(node)
    if act is None or not act.inputs or act.inputs[0] is not node.outputs[0]:
        return {"detail": "it does not feed one activation's data input only"}
    outputs = {t.name for t in graph.outputs}
    after = act.outputs[0].outputs
    if act.outputs[0].name in outputs or len(after) != 1 or after[0].op != "QuantizeLinear":
        return {"detail": f"{act.op} {act.name!r} is not quantized again"}
    nodes = [n for n in (quantize, node, after[0]) if n is not None]
    issue = next((qdq_issue(n) for n in nodes if qdq_issue(n)), None)
    if issue:
        return {"detail": issue}
    if quantize is not None and scale_of(quantize) != scale_of(node):
        return {"detail": f"{node.name!r} dequantizes with another scale than it was quantized"}
    if act.op in CLAMP_OPS and is_relu_at(act, after[0]):
        return None
    issue = lut_issue(act)
    return None if issue is None else {"detail": issue}


def check_vacuous_clamp(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A QuantizeLinear after a Min/Max/Clip against constants whose bounds quantize to the
    int8 limits or beyond: the clamp is the QuantizeLinear's own saturation, and the chain is a
    requantization (MobileNet's Relu6 written Min(Relu(x), 6), quantized to 6/127)."""
    clamp = producer(node.inputs[0])
    issue = qdq_issue(node)
    if issue:
        return {"detail": issue}
    bounds = quantized_bounds(clamp, node) if clamp is not None else None
    if bounds is None or clamp.op == "Relu":
        return {"detail": f"{clamp.op if clamp else 'its input'} is not a clamp against constants"}
    if bounds[0] > -128.0 or bounds[1] < 127.0:
        return {"detail": f"{clamp.op} {clamp.name!r} clamps inside the int8 range at the output "
                          f"scale (to {bounds})"}
    return None


def check_qdq_weights(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Conv / ConvTranspose / MatMul / Gemm between symmetric per-tensor int8 QDQ pairs, whose
    weight is an int8 constant dequantized per tensor and whose bias (input 2) is an int32
    constant in the scale input_scale x weight_scale. (Checked on the op, so that the report
    names the op when its int8 form fails.)"""
    data = producer(node.inputs[0])
    if data is None or data.op != "DequantizeLinear":
        return {"detail": f"its input {node.inputs[0].name} is not dequantized int8"}
    consumers = node.outputs[0].outputs
    issue = qdq_issue(data) or next((qdq_issue(c) for c in consumers
                                     if c.op == "QuantizeLinear" and qdq_issue(c)), None)
    if issue:
        return {"detail": issue}
    issue = dequantized_const(node.inputs[1], "int8") or _transposed_geometry(node)
    if issue:
        return {"detail": issue}
    bias = present(node, 2) if node.op in ("Conv", "ConvTranspose", "Gemm") else None
    if bias is None:
        return None
    issue = dequantized_const(bias, "int32")
    if issue:
        return {"detail": issue}
    product = np.float32(scale_of(data)) * np.float32(scale_of(producer(node.inputs[1])))
    bias_scale = scale_of(producer(bias))
    if abs(bias_scale - float(product)) > BIAS_SCALE_RTOL * float(product):
        return {"detail": f"the bias scale {bias_scale!r} is not input_scale x weight_scale "
                          f"({float(product)!r})"}
    return None


def check_int8_weight_2d(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """The int8 constant input 1 dequantizes is 2-D (an FC's [C, O], not a batch of them)."""
    shape = const_value(producer(node.inputs[1]).inputs[0]).shape
    return None if len(shape) == 2 else {
        "detail": f"the int8 weight {list(shape)} has rank {len(shape)}, not 2"}


def _transposed_geometry(node: gs.Node) -> Optional[str]:
    """Why a ConvTranspose's int8 weight is not [I, O/group, KH, KW] over its input's channels,
    its groups do not divide them or expand to a kernel beyond the float layer's bound, or its
    output size is not given by explicit pads (None: it is, or the node is no ConvTranspose)."""
    if node.op != "ConvTranspose":
        return None
    if "output_shape" in node.attrs:
        return "output_shape is given: write explicit pads"
    src = static_shape(node.inputs[0])
    shape = const_value(producer(node.inputs[1]).inputs[0]).shape
    if src is None or len(shape) != 4 or len(src) != 4 or shape[0] != src[1]:
        return f"the weight {list(shape)} is not [I, O/group, KH, KW] over the input's channels"
    groups = int(node.attrs.get("group", 1))
    dense = int(np.prod(shape, dtype=np.int64)) * groups
    if groups < 1 or shape[0] % groups:
        return f"group={groups} does not divide the {shape[0]} input channels"
    if dense > MAX_DENSE_TRANSPOSE_KERNEL:
        return (f"group={groups}: the block-diagonal groups-1 kernel would hold {dense} values, "
                f"above {MAX_DENSE_TRANSPOSE_KERNEL}")
    return None


def check_qdq_operands(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Both operands of an Add (Mul) are dequantized symmetric per-tensor int8: two activations
    of the output's shape (with ``broadcast``: the second, of the output's rank, may broadcast
    into the first), or one and a constant that broadcasts to it without enlarging it."""
    if len(node.inputs) != 2:
        return {"detail": f"it has {len(node.inputs)} operands"}
    out_shape = static_shape(node.outputs[0])
    consts, full = 0, 0
    for tensor in node.inputs:
        source = producer(tensor)
        if source is None or source.op != "DequantizeLinear":
            return {"detail": f"operand {tensor.name} is not dequantized int8"}
        issue = qdq_issue(source)
        if issue:
            return {"detail": issue}
        if is_const(source.inputs[0]):
            consts += 1
        elif static_shape(tensor) == out_shape:
            full += 1
        elif not args.get("broadcast"):
            return {"detail": f"operand {tensor.name} {static_shape(tensor)} is broadcast to "
                              f"{out_shape}"}
        elif len(static_shape(tensor) or ()) != len(out_shape or ()):
            # The layer lays both activations out in the output's rank (as in float: the
            # elementwise checks refuse it there too).
            return {"detail": f"operand {tensor.name} {static_shape(tensor)} has another rank "
                              f"than the output {out_shape}"}
    if consts > 1:
        return {"detail": "both operands are constants"}
    if full == 0:
        return {"detail": f"no operand has the output's shape {out_shape}"}
    return None


def check_qdq_inputs(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Every input is a symmetric per-tensor int8 activation, dequantized (a Concat's)."""
    for tensor in node.inputs:
        source = producer(tensor)
        if source is None or source.op != "DequantizeLinear" or is_const(source.inputs[0]):
            return {"detail": f"input {tensor.name} is not a dequantized int8 activation"}
        issue = qdq_issue(source)
        if issue:
            return {"detail": issue}
    return None


def check_same_scale(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A QuantizeLinear whose scale is the one its producer's input was dequantized with: the op
    between them (MaxPool, Relu, Transpose, ...) runs on the int8 values as they are. Given the
    op itself (a Split, whose several outputs no chain follows): each of its outputs is read by
    QuantizeLinears only, each such, and none is a graph output."""
    if node.op == "QuantizeLinear":
        return _same_scale(node)
    outputs = {t.name for t in graph.outputs}
    for tensor in node.outputs:
        readers = tensor.outputs
        if tensor.name in outputs or not readers or \
                any(r.op != "QuantizeLinear" for r in readers):
            return {"detail": f"{node.op} {node.name!r}: its output {tensor.name} is not "
                              f"quantized again (read as float)"}
        issue = next(filter(None, map(_same_scale, readers)), None)
        if issue:
            return issue
    return None


def _same_scale(node: gs.Node) -> Details:
    op = producer(node.inputs[0])
    dq = producer(op.inputs[0]) if op is not None and op.inputs else None
    if dq is None or dq.op != "DequantizeLinear":
        return {"detail": "its input is not an op on dequantized int8"}
    issue = qdq_issue(dq) or qdq_issue(node)
    if issue:
        return {"detail": issue}
    if scale_of(dq) != scale_of(node):
        return {"detail": f"{op.op} {op.name!r} changes the scale from {scale_of(dq)!r} to "
                          f"{scale_of(node)!r} (a requantization the layer cannot fuse)"}
    return None


def check_int_clamp(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A Relu, or a Clip, Min or Max against constants: a clamp the int8 values take as they
    are (quantize is monotone)."""
    if clamp_bounds(node) is None:
        return {"detail": f"{node.op} {node.name!r} does not clamp against constants"}
    return None


def check_lut_op(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """An elementwise function of its first input alone, which a 256-entry table holds. Given a
    MaxPool: the table of the function before it (dequantized input, quantized at the pool's
    output scale) is nondecreasing in the int8 value, so that it commutes with the max."""
    issue = lut.commutes_with_pool(node) if node.op == "MaxPool" else lut_issue(node)
    return None if issue is None else {"detail": issue}


def check_qdq_difference(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Both operands of a Sub are dequantized symmetric per-tensor int8 activations, the first
    of the output's shape and the second broadcasting into it."""
    out_shape = static_shape(node.outputs[0])
    for position, tensor in enumerate(node.inputs):
        source = producer(tensor)
        if source is None or source.op != "DequantizeLinear" or is_const(source.inputs[0]):
            return {"detail": f"operand {tensor.name} is not a dequantized int8 activation"}
        issue = qdq_issue(source)
        if issue:
            return {"detail": issue}
    shapes = [static_shape(t) for t in node.inputs]
    if shapes[0] != out_shape or len(shapes[1] or ()) != len(out_shape or ()):
        return {"detail": f"the operands {shapes} are not the output's shape {out_shape} and one "
                          f"of its rank that broadcasts into it"}
    return None


def _op_after(node: gs.Node) -> "tuple[Optional[gs.Node], List[gs.Node]]":
    """The op after ``node`` over any QuantizeLinear -> DequantizeLinear pairs between them,
    and those Q/DQ nodes."""
    between: List[gs.Node] = []
    following = sole_consumer(node)
    while following is not None and following.op == "QuantizeLinear":
        dequantize = sole_consumer(following)
        if dequantize is None or dequantize.op != "DequantizeLinear":
            return None, between
        between += [following, dequantize]
        following = sole_consumer(dequantize)
    return following, between


def check_qdq_channel_shuffle(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """The Reshape ``node`` starts a channel shuffle (Reshape, Transpose of the channel groups,
    Reshape back) whose three ops may each be wrapped in QuantizeLinear -> DequantizeLinear."""
    issue = channel_shuffle_issue(node, lambda n: _op_after(n)[0])
    return None if issue is None else {"detail": issue}


def _op_before(node: gs.Node) -> "tuple[Optional[gs.Node], List[gs.Node]]":
    """The op before ``node`` over any QuantizeLinear -> DequantizeLinear pairs between them,
    and those Q/DQ nodes."""
    between: List[gs.Node] = []
    before = producer(node.inputs[0])
    while before is not None and before.op == "DequantizeLinear":
        quantize = producer(before.inputs[0])
        if quantize is None or quantize.op != "QuantizeLinear":
            return None, between
        between = [quantize, before] + between
        before = producer(quantize.inputs[0])
    return before, between


def check_shuffle_copies(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """The DequantizeLinear before the channel shuffle around the Transpose ``node``, every
    QuantizeLinear / DequantizeLinear between its three ops and the QuantizeLinear after it are
    symmetric per-tensor int8 (zero point 0) of one and the same scale: each DequantizeLinear ->
    op -> QuantizeLinear gives back the int8 values it was given, rearranged (quantize(q * s / s)
    is q), so the shuffle copies values and never requantizes them."""
    split, before = _op_before(node)
    merge, after = _op_after(node)
    if split is None or merge is None:
        return {"detail": f"{node.name!r} is not between two Reshapes"}
    chain = [producer(split.inputs[0]), *before, *after, sole_consumer(merge)]
    ends = [n.op if n is not None else None for n in (chain[0], chain[-1])]
    if ends != ["DequantizeLinear", "QuantizeLinear"]:
        return {"detail": "the shuffle is not between a DequantizeLinear and a QuantizeLinear"}
    issue = next(filter(None, map(qdq_issue, chain)), None)
    if issue:
        return {"detail": issue}
    first = chain[0]
    other = next((n for n in chain if scale_of(n) != scale_of(first)), None)
    if other is None:
        return None
    return {"detail": f"{other.op} {other.name!r} has scale {scale_of(other)!r} but "
                      f"{first.name!r} dequantizes the shuffle's input with {scale_of(first)!r}"}


QNN_CHECKS = MappingProxyType({
    "int8_qdq": check_int8_qdq,
    "dequantizes_activation": check_dequantizes_activation,
    "region_edge": check_region_edge,
    "fused_relu": check_fused_activation,   # its name before it took LUTs too
    "fused_activation": check_fused_activation,
    "vacuous_clamp": check_vacuous_clamp,
    "qdq_weights": check_qdq_weights,
    "int8_weight_2d": check_int8_weight_2d,
    "qdq_operands": check_qdq_operands,
    "qdq_inputs": check_qdq_inputs,
    "same_scale": check_same_scale,
    "int_clamp": check_int_clamp,
    "lut_op": check_lut_op,
    "qdq_difference": check_qdq_difference,
    "qdq_channel_shuffle": check_qdq_channel_shuffle,
    "shuffle_copies": check_shuffle_copies,
})
