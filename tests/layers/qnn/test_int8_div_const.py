"""Paddle's hard-swish ``x * clip(x + 3, 0, 6) / 6`` right before a MaxPool in int8: onnxruntime's
quantizer leaves the Div's output unquantized (``DequantizeLinear -> Div -> MaxPool ->
QuantizeLinear``); ``mrvl.qnn_lut_maxpool`` writes it as the Div's LUT at the pool's output scale
then the int8 Maxpool2D, so the model is one Mrvl subgraph, bit-equal to onnxruntime's run of the
QDQ model. A Div by a negative constant (decreasing: it does not commute with the max) is not
taken by the LUT (``lut_op`` on the MaxPool refuses it): the float span ``Div -> MaxPool`` between
the pairs runs as fp16 layers (``mrvl.div_const``, the float MaxPool), still bit-equal here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from support.int8 import converted_int8, run_both


def _paddle_hardswish_pool(divisor: float) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("Constant", [], ["three"], value=numpy_helper.from_array(
                 np.array(3.0, np.float32), "three")),
             helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(
                 np.array(0.0, np.float32), "zero")),
             helper.make_node("Constant", [], ["six"], value=numpy_helper.from_array(
                 np.array(6.0, np.float32), "six")),
             helper.make_node("Constant", [], ["divisor"], value=numpy_helper.from_array(
                 np.array(divisor, np.float32), "divisor")),
             helper.make_node("Add", ["y", "three"], ["shifted"]),
             helper.make_node("Clip", ["shifted", "zero", "six"], ["clipped"]),
             helper.make_node("Mul", ["y", "clipped"], ["product"]),
             helper.make_node("Div", ["product", "divisor"], ["hswish"], name="hswish_div"),
             helper.make_node("MaxPool", ["hswish"], ["pooled"], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["pooled", "w2", "b2"], ["out"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "paddle_hswish", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [1, 3, 16, 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _exact(result, qdq: Path) -> bool:
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.uniform(-3, 3, (1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    got, want = run_both(qdq, result.out_dir, feeds)
    return bool(np.array_equal(got, want))


def _div(result) -> dict:
    [div] = [n for n in result.report["nodes"] if n["name"] == "hswish_div"]
    return div


def _cpu_nodes(result) -> list:
    return [n["name"] for n in result.report["nodes"] if n["placement"] == "cpu"]


def test_div_before_maxpool_is_one_int8_subgraph(tmp_path):
    result, qdq = converted_int8(_paddle_hardswish_pool(6.0), tmp_path / "six", span=3.0)
    qdq_model = onnx.load(qdq)
    div = next(n for n in qdq_model.graph.node if n.name == "hswish_div")
    # The case at hand: onnxruntime's quantizer writes no QuantizeLinear between Div and MaxPool.
    assert [n.op_type for n in qdq_model.graph.node if div.output[0] in n.input] == ["MaxPool"]
    assert _div(result)["placement"] == "mrvl"
    assert _cpu_nodes(result) == []
    summary = result.report["summary"]
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0)
    assert _exact(result, qdq)


def test_decreasing_div_before_maxpool_is_no_lut_but_fp16_layers(tmp_path):
    result, qdq = converted_int8(_paddle_hardswish_pool(-6.0), tmp_path / "minus_six", span=3.0)
    assert _div(result)["rule"] == "mrvl.div_const"
    pool = next(n for n in result.report["nodes"] if n["op_type"] == "MaxPool")
    assert pool["rule"] == "mrvl.maxpool2d_nhwc2nhwc"
    assert _cpu_nodes(result) == []
    assert _exact(result, qdq)
