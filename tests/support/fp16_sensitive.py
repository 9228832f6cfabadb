"""A model whose fp16-rounded weights cancel badly (issue 30's fp16 remedy).

conv_dup copies each of the 2 input channels twice (weights 1 and 0: exact in fp16), so
channels k and k+2 hold the same values; conv_cancel reads channel k with weight A + d and
channel k+2 with weight -A (A = 1000, d = 0.3): the true output is d * x, but float16 holds
1000.3 as 1000.5 (its step at 1000 is 0.5), so the fp16 output is 0.5 * x, 67% off. relu and
conv_tail (ordinary weights) follow, so the model has layers on both sides of the culprit.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

BIG, SMALL = 1000.0, 0.3
SHAPE = [1, 2, 8, 8]


def cancelling_model(seed: int = 0) -> onnx.ModelProto:
    """x[1,2,8,8] -> conv_dup (1x1, 2->4) -> conv_cancel (1x1, 4->2) -> relu ->
    conv_tail (3x3, 2->3) -> y."""
    rng = np.random.default_rng(seed)
    dup = np.zeros((4, 2, 1, 1))
    for k in range(4):
        dup[k, k % 2] = 1.0
    cancel = np.zeros((2, 4, 1, 1))
    for k in range(2):
        cancel[k, k], cancel[k, k + 2] = BIG + SMALL, -BIG
    inits = {"w_dup": dup, "w_cancel": cancel, "b_cancel": np.zeros(2),
             "w_tail": rng.standard_normal((3, 2, 3, 3)) * 0.5, "b_tail": rng.standard_normal(3)}
    nodes = [helper.make_node("Conv", ["x", "w_dup"], ["d"], name="conv_dup"),
             helper.make_node("Conv", ["d", "w_cancel", "b_cancel"], ["c"], name="conv_cancel"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w_tail", "b_tail"], ["y"], name="conv_tail",
                              pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "cancelling",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def conv_bn_model(seed: int = 0) -> onnx.ModelProto:
    """x[1,2,8,8] -> conv (3x3, 2->4) -> bn (BatchNormalization, folded into the Conv2D
    layer) -> y: a layer made of two nodes that read weights."""
    rng = np.random.default_rng(seed)
    inits = {"w": rng.standard_normal((4, 2, 3, 3)), "scale": rng.uniform(0.5, 2, 4),
             "shift": rng.standard_normal(4), "mean": rng.standard_normal(4) * 0.1,
             "var": rng.uniform(0.5, 2, 4)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"],
                              ["y"], name="bn")]
    graph = helper.make_graph(
        nodes, "conv_bn", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    onnx.checker.check_model(model)
    return model
