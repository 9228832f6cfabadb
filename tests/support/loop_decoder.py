"""A Conv backbone in front of a Loop whose body defeats onnx's strict shape inference, as
slanet-plus's (PaddleOCR) decoder does: an If inside the Loop body whose branch declares its
output a scalar while the Cast it returns is ``[1]`` ("Inferred shape and existing shape differ
in rank: (1) vs (0)"). onnxruntime runs it (it merges the shapes leniently). The Loop halves the
backbone's features until their max falls below ``threshold`` (at most ``max_steps`` times) and
scans each step: how many steps it runs, the scan output's leading dim, depends on the input.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _branches():
    flag = helper.make_tensor_value_info("flag_cast", TensorProto.BOOL, [])  # declared rank 0
    then_graph = helper.make_graph(
        [helper.make_node("Cast", ["flag"], ["flag_cast"], to=TensorProto.BOOL)],
        "then", [], [flag])
    stop = helper.make_tensor_value_info("stop", TensorProto.BOOL, [])
    else_graph = helper.make_graph(
        [helper.make_node("Constant", [], ["stop"],
                          value=helper.make_tensor("no", TensorProto.BOOL, [], [False]))],
        "else", [], [stop])
    return then_graph, else_graph


def _body(channels: int, threshold: float) -> onnx.GraphProto:
    then_graph, else_graph = _branches()
    nodes = [
        helper.make_node("Mul", ["v_in", "half"], ["v_next"]),
        helper.make_node("ReduceMax", ["v_next"], ["peak"], keepdims=1),
        helper.make_node("Reshape", ["peak", "one"], ["peak1"]),
        helper.make_node("Greater", ["peak1", "threshold"], ["flag"]),
        helper.make_node("If", ["cond_in"], ["cond_out"], then_branch=then_graph,
                         else_branch=else_graph),
        helper.make_node("Identity", ["v_next"], ["v_out"]),
        helper.make_node("Identity", ["v_next"], ["scan"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([threshold], np.float32), "threshold")]
    return helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1, channels])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, channels]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [1, channels])],
        inits)


def loop_decoder(channels: int = 4, size: int = 8, threshold: float = 0.05,
                 max_steps: int = 16, seed: int = 0, plain_failure: bool = False,
                 tail: bool = False, negative: bool = False) -> onnx.ModelProto:
    """x ``[1, 3, size, size]`` -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Loop ->
    (``last`` ``[1, channels]``, ``steps`` ``[k, 1, channels]`` after a Softmax). With
    ``plain_failure``, an Add of mismatched widths after the backbone as well: a plain node's
    own failure of shape inference. With ``tail``, ``last`` through a Conv-free tail (Mul by 2,
    Relu) whose static shape onnxruntime tells: it need not stay on CPU. With ``negative``, the
    Conv's weights all negative: zeros and ones both stop the Loop after one step, a negative
    input does not."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32)
    weight = -np.abs(weight) if negative else weight
    bias = np.zeros(channels, np.float32)
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array(max_steps, np.int64), "max_steps"),
             numpy_helper.from_array(np.array(True), "go")]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["conv"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"], name="pool"),
        helper.make_node("Flatten", ["pool"], ["feat"], name="flatten"),
        helper.make_node("Loop", ["max_steps", "go", "feat"], ["last", "scanned"],
                         body=_body(channels, threshold), name="decoder"),
        helper.make_node("Softmax", ["scanned"], ["steps"], axis=-1, name="softmax"),
    ]
    outputs = [helper.make_tensor_value_info("last", TensorProto.FLOAT, [1, channels]),
               helper.make_tensor_value_info("steps", TensorProto.FLOAT, ["k", 1, channels])]
    if tail:
        inits.append(numpy_helper.from_array(np.full((1, channels), 2, np.float32), "two"))
        nodes += [helper.make_node("Mul", ["last", "two"], ["doubled"], name="double"),
                  helper.make_node("Relu", ["doubled"], ["tail"], name="tail_relu")]
        outputs.append(helper.make_tensor_value_info("tail", TensorProto.FLOAT, [1, channels]))
    if plain_failure:
        inits.append(numpy_helper.from_array(np.ones((1, channels + 1), np.float32), "wide"))
        nodes.append(helper.make_node("Add", ["feat", "wide"], ["bad"], name="bad_add"))
        outputs.append(helper.make_tensor_value_info("bad", TensorProto.FLOAT, [1, "w"]))
    graph = helper.make_graph(
        nodes, "loop_decoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model
