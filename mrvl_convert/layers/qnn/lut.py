"""LUT: any unary function of an int8 value as a 256-entry int8 table, and the clamps that are
plain relu or integer clamps instead.

A QDQ chain ``DequantizeLinear -> f -> QuantizeLinear`` whose ``f`` is elementwise and reads no
other activation (HardSwish, HardSigmoid, LeakyRelu, a Clip, a Div by one constant value...)
maps each of the 256 int8 inputs to one int8 output. The newer Marvell codegen writes exactly
that after an int8 Conv2D, FC, Sum2D or Mul2D: ``activation_type`` "LUT" with a
``lut_const_name`` constant, from a ``take(table, reinterpret(x, uint8))`` fused into the
composite (princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``CreateCompositeMrvlQnnConv2DLayer``,
``CreateCompositeMrvlQnnFcLayer``, ``CreateCompositeMrvlQnnSumLayer``,
``CreateCompositeMrvlQnnMulLayer``; python/tvm/relay/op/contrib/mrvl.py ``qnn_conv_pattern``
and ``qnn_sum_pattern``); TVM's ``create_integer_lookup_table`` orders the table by the uint8 bit
pattern of the int8 input (0..127, then -128..-1), and so does ``table``.

The table is built by onnxruntime running the QDQ model's own nodes (the DequantizeLinear, ``f``
with its attributes and constant operands, the QuantizeLinear) on the 256 values: the lookup is
exact by construction, whatever onnxruntime's float ``f`` rounds like.

A Relu, or a Clip / Min / Max against constants whose bounds quantize to 0 (or below) and to the
int8 limits, is max(q, 0) or nothing at the output scale, since quantize is monotone
(quantize(clip(x, lo, hi)) = clip(quantize(x), quantize(lo), quantize(hi))): those stay the
codegen's ``relu`` and ``requant`` forms.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, present, producer, scale_of
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._kind import Activation
from mrvl_convert.layers.qnn.as_written import session_options

#: Elementwise ops of one activation input a LUT may stand for (their other inputs constants of
#: one value); Relu and relu-like clamps are fused as relu instead.
LUT_OPS = ("HardSwish", "HardSigmoid", "LeakyRelu", "Clip", "Div", "PRelu", "Elu", "Softplus")
#: Clamps against constants: relu-like, a requant (vacuous), or an integer clamp.
CLAMP_OPS = ("Relu", "Clip", "Min", "Max")
_OPSET = 17


def quantized_value(value: float, scale: float) -> float:
    """onnxruntime's QuantizeLinear of one float to int8, zero point 0."""
    q = np.float32(value) / np.float32(scale) if np.isfinite(value) else np.float32(value)
    return float(np.clip(np.rint(q), -128.0, 127.0))


def constant_value(tensor: gs.Tensor) -> Optional[np.ndarray]:
    """A constant operand's float32 value: a constant, or the DequantizeLinear of one (as
    onnxruntime's quantizer writes the constants of Add, Mul, Div...); None otherwise."""
    if is_const(tensor):
        return const_value(tensor).astype(np.float32)
    node = producer(tensor)
    if node is None or node.op != "DequantizeLinear" or not is_const(node.inputs[0]):
        return None
    zero = present(node, 2)
    zero = const_value(zero).astype(np.int32) if zero is not None else 0
    q = const_value(node.inputs[0]).astype(np.int32) - zero
    return (q.astype(np.float32) * np.float32(scale_of(node))).astype(np.float32)


def clamp_bounds(node: gs.Node) -> Optional[Tuple[float, float]]:
    """(low, high) of a Relu, Clip, Min or Max against constants; None: not such a clamp."""
    if node.op == "Relu":
        return 0.0, float("inf")
    if node.op == "Clip":
        bounds = [float(node.attrs.get("min", -np.inf)), float(node.attrs.get("max", np.inf))]
        for i in (1, 2):
            tensor = present(node, i)
            if tensor is not None:
                value = constant_value(tensor)
                if value is None or value.size != 1:
                    return None
                bounds[i - 1] = float(value.reshape(-1)[0])
        return bounds[0], bounds[1]
    if node.op in ("Min", "Max") and len(node.inputs) == 2:
        value = constant_value(node.inputs[1])
        if value is None or value.size != 1:
            return None
        bound = float(value.reshape(-1)[0])
        return (-np.inf, bound) if node.op == "Min" else (bound, np.inf)
    return None


def quantized_bounds(clamp: gs.Node, quantize: gs.Node) -> Optional[Tuple[float, float]]:
    """A clamp's bounds quantized at ``quantize``'s scale (None: not a clamp)."""
    bounds = clamp_bounds(clamp)
    if bounds is None:
        return None
    return quantized_value(bounds[0], scale_of(quantize)), \
        quantized_value(bounds[1], scale_of(quantize))


def is_relu_at(clamp: gs.Node, quantize: gs.Node) -> bool:
    """A clamp that is max(q, 0) at ``quantize``'s scale: low bound 0, high at or past 127."""
    bounds = quantized_bounds(clamp, quantize)
    return bounds is not None and bounds[0] == 0.0 and bounds[1] >= 127.0


def lut_issue(node: gs.Node) -> Optional[str]:
    """Why ``node`` is not a unary function of its first input that a LUT can hold."""
    if node.op not in LUT_OPS:
        return f"{node.op} is not one of the ops a LUT stands for ({', '.join(LUT_OPS)})"
    if node.op == "Clip":
        return None if clamp_bounds(node) is not None else \
            f"Clip {node.name!r} has bounds computed at run time"
    for tensor in node.inputs[1:]:
        if not tensor.name:
            continue
        value = constant_value(tensor)
        if value is None or value.size != 1:
            return (f"{node.op} {node.name!r} reads {tensor.name}, which is not one constant "
                    f"value (a LUT is one function of the int8 input)")
    if len(node.outputs) != 1:
        return f"{node.op} {node.name!r} has {len(node.outputs)} outputs"
    return None


def commutes_with_pool(pool: gs.Node) -> Optional[str]:
    """Why the table of the function before ``pool`` (a MaxPool between a function of dequantized
    int8 and one QuantizeLinear, at whose scale the table is taken) does not commute with the
    max: it decreases somewhere on the int8 values."""
    op = producer(pool.inputs[0])
    dq = producer(op.inputs[0]) if op is not None and op.inputs else None
    readers = pool.outputs[0].outputs
    if dq is None or len(readers) != 1 or readers[0].op != "QuantizeLinear":
        return (f"MaxPool {pool.name!r} is not between a function of dequantized int8 and one "
                f"QuantizeLinear")
    values = table(dq, op, readers[0]).reshape(-1)
    by_value = np.concatenate([values[128:], values[:128]]).astype(np.int64)  # int8 -128..127
    if np.any(np.diff(by_value) < 0):
        return (f"{op.op} {op.name!r} decreases somewhere on the int8 values: its table does "
                f"not commute with the MaxPool after it")
    return None


def fused(composite: Composite) -> Tuple[Optional[Activation], List[Tuple[str, np.ndarray]]]:
    """The activation a chain ending ``out_q [act_dq act act_q]`` fuses (the rules checked it:
    ``fused_activation``) and the constants it adds: relu, or a LUT and its table."""
    act = composite.binding.node("act")
    if act is None:
        return None, []
    act_q = composite.binding.node("act_q")
    if act.op in CLAMP_OPS and is_relu_at(act, act_q):
        return Activation.RELU, []
    return Activation.LUT, [("lut", table(composite.binding.node("act_dq"), act, act_q))]


def table(dequantize: gs.Node, op: gs.Node, quantize: gs.Node) -> np.ndarray:
    """The LUT of ``DequantizeLinear -> op -> QuantizeLinear``: int8 [1, 256], entry u the
    output for the int8 input whose uint8 bit pattern is u, as onnxruntime computes it."""
    import onnxruntime as ort

    session = ort.InferenceSession(_chain_model(dequantize, op, quantize), session_options(),
                                   providers=["CPUExecutionProvider"])
    inputs = np.arange(256, dtype=np.uint8).view(np.int8)
    return session.run(None, {"q": inputs})[0].astype(np.int8).reshape(1, 256)


def _chain_model(dequantize: gs.Node, op: gs.Node, quantize: gs.Node) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.float32(scale_of(dequantize)).reshape(()), "s_in"),
             numpy_helper.from_array(np.float32(scale_of(quantize)).reshape(()), "s_out"),
             numpy_helper.from_array(np.zeros((), np.int8), "zp")]
    nodes = [helper.make_node("DequantizeLinear", ["q", "s_in", "zp"], ["x"])]
    operands = ["x"]
    for k, tensor in enumerate(op.inputs[1:]):
        if not tensor.name:
            operands.append("")
            continue
        inits.append(numpy_helper.from_array(constant_value(tensor), f"c{k}"))
        operands.append(f"c{k}")
    attrs = {k: v for k, v in op.attrs.items() if not (op.op == "Clip" and k in ("min", "max"))}
    if op.op == "Clip":  # opset 11+ reads the bounds as inputs
        low, high = clamp_bounds(op)
        for name, value in (("lo", low), ("hi", high)):
            inits.append(numpy_helper.from_array(np.float32(value).reshape(()), name))
        operands = ["x", "lo", "hi"]
    nodes.append(helper.make_node(op.op, operands, ["y"], **attrs))
    nodes.append(helper.make_node("QuantizeLinear", ["y", "s_out", "zp"], ["out"]))
    graph = helper.make_graph(nodes, "mrvl_lut", [helper.make_tensor_value_info(
        "q", TensorProto.INT8, [256])], [helper.make_tensor_value_info(
            "out", TensorProto.INT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)],
                              ir_version=8)
    return model.SerializeToString()
