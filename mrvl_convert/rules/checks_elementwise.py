"""Constraints of the newer layer set's elementwise kinds (rules/marvell/), part of the
vocabulary of ``checks.CHECKS``: same signature, same contract (None, or the details that fill a
reason's placeholders)."""
from __future__ import annotations

from typing import AbstractSet, Any, Callable, Dict, List, Mapping, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (activation_inputs, attr, const_value, is_const, present,
                                     producer, softmax_axis, static_shape)
from mrvl_convert.core.macs import MAC_OPS
from mrvl_convert.rules.int8_forms import QDQ_OPS as _QDQ, builtin_int8_op_types

Details = Optional[Dict[str, Any]]

def check_rank_in(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    shape = static_shape(node.outputs[0])
    rank = len(shape) if shape is not None else "unknown"
    return None if rank in args["ranks"] else {"rank": rank}


def check_binary_operands(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Two operands; one (the first, when ``ordered``) has the output's shape and the other
    broadcasts into it without a new axis; a constant operand only when ``const`` is true, and
    only within fp16's range (the layer holds it in fp16)."""
    if len(node.inputs) != 2:
        return {"detail": f"{node.op} has {len(node.inputs)} operands"}
    out = static_shape(node.outputs[0])
    consts = [t for t in node.inputs if is_const(t)]
    if len(consts) == 2 or (consts and not args.get("const", True)):
        return {"detail": f"operand {consts[0].name} is a constant; the layer takes activations"}
    for tensor in consts:  # the layer's constant is fp16: one beyond its range is inf there
        if fp16_range_detail(tensor):
            return fp16_range_detail(tensor)
    shapes = [list(const_value(t).shape) if is_const(t) else static_shape(t)
              for t in node.inputs]
    full = [k for k, shape in enumerate(shapes) if shape == out and not is_const(node.inputs[k])]
    if not full or (args.get("ordered", False) and full[0] != 0):
        return {"detail": f"operands {shapes[0]} and {shapes[1]}: the first must have the "
                          f"output's shape {out}" if args.get("ordered", False) else
                          f"operands {shapes[0]} and {shapes[1]}: neither activation has the "
                          f"output's shape {out}"}
    other = shapes[1 - full[0]]
    if not is_const(node.inputs[1 - full[0]]) and len(other) != len(out):
        return {"detail": f"operand {other} has another rank than {out}"}
    return None


def check_same_shape_operands(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph
                              ) -> Details:
    """Two or more operands, every one an activation of the output's shape (nothing
    broadcasts: ``layers/_max_pairs.py`` concatenates them)."""
    out = static_shape(node.outputs[0])
    if len(node.inputs) < 2:
        return {"detail": f"{node.op} has {len(node.inputs)} operand"}
    for tensor in node.inputs:
        if is_const(tensor):
            return {"detail": f"operand {tensor.name} is a constant"}
        if static_shape(tensor) != out:
            return {"detail": f"operand {tensor.name} {static_shape(tensor)} broadcasts into "
                              f"the output's shape {out}"}
    return None


def fp16_range_detail(tensor: gs.Tensor) -> Details:
    """None when every value of constant ``tensor`` is finite and within fp16's range (a layer
    holds it in fp16: a value beyond is inf there and the runtime refuses the artifact)."""
    peak = float(np.max(np.abs(const_value(tensor).astype(np.float64)), initial=0.0))
    if peak <= 65504.0:
        return None
    return {"detail": f"constant {tensor.name} reaches {peak:.6g}, beyond fp16's largest "
                      "value 65504: the layer's fp16 constant cannot hold it"}


def check_const_divisor(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Div(x, c): c constant, broadcasting into x, with a finite reciprocal that fp16 holds."""
    divisor = present(node, 1)
    if divisor is None or not is_const(divisor) or is_const(node.inputs[0]):
        return {"detail": "only a division of an activation by a constant maps (to a product "
                          "by its reciprocal)"}
    if static_shape(node.inputs[0]) != static_shape(node.outputs[0]):
        return {"detail": "the divisor broadcasts the activation to a larger shape"}
    value = const_value(divisor).astype(np.float64)
    with np.errstate(divide="ignore"):
        reciprocal = 1.0 / value
    if not np.all(np.isfinite(reciprocal)) or np.any(np.abs(reciprocal) > 65504.0):
        return {"detail": "a reciprocal of the divisor is infinite or beyond fp16's range"}
    return None


def _decimal_ok(value: float) -> bool:
    """Whether "%f" (what the codegen writes) keeps ``value`` to half an fp16 step."""
    if not np.isfinite(value):
        return False
    return abs(float(f"{value:f}") - value) <= abs(value) * 2.0 ** -12


def check_decimal_exact(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """The attribute ``attr`` (or constant input ``index``, if present) survives being written
    with six decimals, as the newer codegen writes alpha, a_min, a_max and exponent."""
    if "attr" in args:
        value = attr(node, args["attr"], args.get("default"))
    else:
        tensor = present(node, int(args["index"]))
        if tensor is None or not is_const(tensor):
            return None
        value = const_value(tensor).reshape(-1)[0]
    if value is None:
        return None
    value = float(np.float32(value))
    return None if _decimal_ok(value) else {"value": value, "text": f"{value:f}"}


def check_scalar_const_input(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    tensor = present(node, int(args["index"]))
    if tensor is None or not is_const(tensor):
        return {"detail": f"input {args['index']} is not a constant"}
    size = const_value(tensor).size
    return None if size == 1 else {"detail": f"input {tensor.name} has {size} values, not one"}


def check_softmax_axis(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Softmax over the features of a 2-D tensor, the channels of a 4-D one, or the last axis
    of a 3-D or 4-D token tensor (attention scores). Before opset 13 a 4-D Softmax on axis 1
    runs over C*H*W at once: the channels only when H = W = 1; on the last axis the two
    definitions agree."""
    shape = static_shape(node.inputs[0]) or []
    rank, opset = len(shape), int(getattr(graph, "opset", None) or 13)
    axis = softmax_axis(node, rank, opset)
    if rank in (2, 3, 4) and axis == rank - 1:
        return None
    if rank == 4 and axis == 1 and (opset >= 13 or shape[2:] == [1, 1]):
        return None
    return {"axis": axis, "rank": rank, "opset": opset}


def check_channel_varying(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A BatchNormalization, or a Mul by a constant of more than one value: a per-channel
    scale. A Mul by one value is no depthwise convolution's business: as a Mul2D it computes in
    the order its input has (a token tensor's logical order), where a Conv2D needs NHWC. Inside
    an int8 region (a dequantized input) a Mul2D has no form for a float constant, so there the
    depthwise Conv2D takes a Mul by one value too, as it takes any dequantized input."""
    consts = [t for t in node.inputs if is_const(t)]
    if node.op != "Mul" or len(consts) != 1 or const_value(consts[0]).size != 1:
        return None
    if any(_dequantized(t) for t in activation_inputs(node)):
        return None
    return {"detail": "a Mul by one value is a Mul2D (mrvl.mul), not a per-channel scale"}


def check_float_region(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Not inside an int8 (QDQ) region: no activation input comes from a DequantizeLinear and
    the output feeds no QuantizeLinear. There the int8 model's result is onnxruntime's float op
    between the two; an fp16 layer would round it differently (and the set has no int8 form).

    The exception is a float island, a layer ``--keep-fp16`` left in float: an op that reads
    dequantized int8 and leads to a kept layer (quantize_static quantizes the input of every
    layer it quantizes, so a float Conv, Gemm or MatMul reached without a QuantizeLinear is a
    kept one), or one that follows a kept layer or a DequantizeLinear into a QuantizeLinear.
    The island's layers are fp16 already; this one joins them between its quant layers.

    So does an op no int8 layer takes (``int8_forms.py``: a LayerNormalization, a Pow, an Erf),
    and every op of a float span holding one, ops joined with no QDQ pair between them (a
    LayerNorm's ``x - mean`` and ``d * d``, a GELU's ``x / sqrt(2)`` before its Erf:
    ``frontend/float_pairs.py`` dropped the pairs there): no int8 form can take the span, so it
    runs as fp16 layers between the region's quant layers, and verify's reference rounds them
    where the artifact does (``verify/kept_fp16.py``).

    So does an op whose result leaves the int8 region unquantized (``_leaves_unquantized``: a
    classifier's last Sigmoid on a dequantized logit, written as the model output): the int8
    model computes it in float32 on the dequantized value, the artifact as an fp16 layer after
    the dequantizing quant layer, rounded where verify's reference rounds it too.
    """
    refused = _int8_neighbour(node, graph)
    return None if refused is None or _in_float_span(node) else refused


def _int8_neighbour(node: gs.Node, graph: gs.Graph) -> Details:
    for tensor in activation_inputs(node):
        if _dequantized(tensor) and not _leads_to_float_layer(node) \
                and not _leaves_unquantized(node, graph):
            return {"detail": f"its input {tensor.name} is dequantized int8"}
    for consumer in node.outputs[0].outputs:
        if consumer.op == "QuantizeLinear" and not _in_float_island(node):
            return {"detail": f"its output is quantized to int8 by {consumer.name}"}
    return None


def _no_int8_form(node: gs.Node) -> bool:
    return node.op not in _QDQ and node.op not in builtin_int8_op_types()


def _in_float_span(node: gs.Node) -> bool:
    """``node`` or an op joined to it through float tensors (no QDQ node between, within
    ``_ISLAND_DEPTH`` steps) has no int8 form; or the span is two or more ops and none
    computes MACs (a kept BatchNormalization's Mul -> Add -> Elu, which the quantizer left in
    float: an int8 layer is DequantizeLinear -> op -> QuantizeLinear, and no op of the span
    has both; a Conv's own activation, Conv -> Relu -> QuantizeLinear, is not such a span)."""
    frontier, seen, span = [node], {id(node)}, [node]
    for _ in range(_ISLAND_DEPTH):
        if any(_no_int8_form(n) for n in frontier):
            return True
        frontier = [n for current in frontier for n in _producers(current) + _consumers(current)
                    if n.op not in _QDQ and id(n) not in seen]
        seen.update(id(n) for n in frontier)
        span.extend(frontier)
        if not frontier:
            break
    return len(span) > 1 and not any(n.op in MAC_OPS for n in span)


def _dequantized(tensor: gs.Tensor) -> bool:
    source = producer(tensor)
    return source is not None and source.op == "DequantizeLinear"


# The layers --keep-fp16 keeps in float: the compute layers, those that carry weights.
_FLOAT_LAYERS = MAC_OPS
_ISLAND_DEPTH = 32  # float ops walked back before giving up (a kept layer is a few ops long)


def _leads_to_float_layer(node: gs.Node) -> bool:
    """The output reaches a Conv, Gemm or MatMul through float ops (no QuantizeLinear)."""
    return _reaches(node, _consumers, _FLOAT_LAYERS)


def _in_float_island(node: gs.Node) -> bool:
    """Some activation input reaches a DequantizeLinear, or a kept Conv, Gemm or MatMul,
    through float ops (no QuantizeLinear)."""
    return _reaches(node, _producers, _FLOAT_LAYERS | {"DequantizeLinear"})


def _leaves_unquantized(node: gs.Node, graph: gs.Graph) -> bool:
    """Every path from ``node``'s outputs reaches a model output with no QuantizeLinear on it
    (within ``_ISLAND_DEPTH`` steps): nothing after it is int8 again."""
    outputs = {id(t) for t in graph.outputs}

    def writes_output(near: gs.Node) -> bool:
        return any(id(t) in outputs for t in near.outputs)

    if _walk(node, _consumers, lambda near: near.op == "QuantizeLinear") is not False:
        return False  # quantized again somewhere, or too far to tell
    return writes_output(node) or _walk(node, _consumers, writes_output) is True


def _consumers(node: gs.Node) -> List[gs.Node]:
    return [c for t in node.outputs for c in t.outputs]


def _producers(node: gs.Node) -> List[gs.Node]:
    return [n for n in map(producer, activation_inputs(node)) if n is not None]


def _reaches(node: gs.Node, step: Callable[[gs.Node], List[gs.Node]],
             targets: AbstractSet[str]) -> bool:
    """A node of an op in ``targets`` is ``step`` by ``step`` from ``node``, through float ops
    (a QuantizeLinear ends the walk), within ``_ISLAND_DEPTH`` steps."""
    return _walk(node, step, lambda near: near.op in targets) is True


def _walk(node: gs.Node, step: Callable[[gs.Node], List[gs.Node]],
          hit: Callable[[gs.Node], bool]) -> Optional[bool]:
    """True when a node ``hit`` accepts is ``step`` by ``step`` from ``node`` through float
    ops (a QuantizeLinear ends a path once ``hit`` has seen it), False when none is, None when
    ``_ISLAND_DEPTH`` steps did not end the walk."""
    frontier, seen = [node], set()
    for _ in range(_ISLAND_DEPTH):
        following = []
        for near in (n for current in frontier for n in step(current)):
            if hit(near):
                return True
            if near.op != "QuantizeLinear" and id(near) not in seen:
                seen.add(id(near))
                following.append(near)
        if not following:
            return False
        frontier = following
    return None


ELEMENTWISE_CHECKS: Dict[str, Any] = {
    "rank_in": check_rank_in,
    "binary_operands": check_binary_operands,
    "same_shape_operands": check_same_shape_operands,
    "const_divisor": check_const_divisor,
    "decimal_exact": check_decimal_exact,
    "scalar_const_input": check_scalar_const_input,
    "softmax_axis": check_softmax_axis,
    "float_region": check_float_region,
    "channel_varying": check_channel_varying,
}
