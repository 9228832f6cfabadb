"""A hand-made artifact directory (Mrvl -> CPU -> Mrvl) and the ONNX model it stands for.

Built without the converter, so HybridSession, compare and mrvl-verify are tested against the
written formats alone: x -Conv+Relu-> c -Sigmoid-> s -Conv(1x1)-> y.
"""
from __future__ import annotations

import json
import os
from typing import Dict, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from support.jsonbuild import SubgraphBuilder, conv2d, to_nchw, to_nhwc

X_SHAPE = (1, 3, 8, 8)


def weights(seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.5,
            "b1": rng.standard_normal(4).astype(np.float32) * 0.1,
            "w2": rng.standard_normal((2, 4, 1, 1)).astype(np.float32),
            "b2": rng.standard_normal(2).astype(np.float32) * 0.1}


def original_model(w: Dict[str, np.ndarray]) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c0"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["c"], name="relu1"),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
             helper.make_node("Conv", ["s", "w2", "b2"], ["y"], name="conv2")]
    graph = helper.make_graph(
        nodes, "handmade", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])],
        [numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _mrvl_stage(directory: str, name: str, inp: str, shape, weight, bias, pads, relu,
                sources) -> None:
    b = SubgraphBuilder(f"{name}_sym")
    x = b.input(inp, shape)
    y = conv2d(b, to_nhwc(b, x), weight, bias, shape[2:], pads=pads, relu=relu,
               source_nodes=sources)
    b.write(directory, [to_nchw(b, y)], stem=name)


def _tensor(name: str, shape, layout: str = "NCHW") -> Dict[str, object]:
    return {"tensor": name, "shape": list(shape), "dtype": "float32", "layout": layout}


def _cpu_stage(directory: str) -> None:
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid")], "cpu0",
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 4, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, os.path.join(directory, "hm_cpu_0.onnx"))


def write_artifact(directory: str, w: Dict[str, np.ndarray]) -> str:
    os.makedirs(directory, exist_ok=True)
    _mrvl_stage(directory, "hm_mrvl_0", "x", X_SHAPE, w["w1"], w["b1"], (1, 1, 1, 1), True,
                ["conv1", "relu1"])
    _cpu_stage(directory)
    _mrvl_stage(directory, "hm_mrvl_1", "s", (1, 4, 8, 8), w["w2"], w["b2"], (0, 0, 0, 0),
                False, ["conv2"])
    c_shape = (1, 4, 8, 8)
    manifest = {
        "format_version": "1", "tool_version": "test",
        "model": {"name": "handmade", "file": "handmade.onnx", "sha256": "",
                  "inputs": [{"name": "x", "shape": list(X_SHAPE), "dtype": "float32"}],
                  "outputs": [{"name": "y", "shape": [1, 2, 8, 8], "dtype": "float32"}]},
        "options": {"policy": "multi", "shapes": {}, "rules": ["builtin"]},
        "stages": [
            {"kind": "mrvl", "name": "hm_mrvl_0", "nodes_json": "hm_mrvl_0-nodes.json",
             "consts_json": "hm_mrvl_0-consts.json", "inputs": [_tensor("x", X_SHAPE)],
             "outputs": [_tensor("c", c_shape)]},
            {"kind": "cpu", "name": "hm_cpu_0", "onnx": "hm_cpu_0.onnx",
             "inputs": [_tensor("c", c_shape)], "outputs": [_tensor("s", c_shape)]},
            {"kind": "mrvl", "name": "hm_mrvl_1", "nodes_json": "hm_mrvl_1-nodes.json",
             "consts_json": "hm_mrvl_1-consts.json", "inputs": [_tensor("s", c_shape)],
             "outputs": [_tensor("y", (1, 2, 8, 8))]}]}
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return directory


def make(directory: str, seed: int = 0) -> Tuple[onnx.ModelProto, str]:
    w = weights(seed)
    return original_model(w), write_artifact(directory, w)
