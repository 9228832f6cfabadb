"""Small batchless frame networks whose int8 forms the fp16 ones should match (madmom's beats
TCN and onsets CNN in int8): built with onnx.helper, quantized by Marvell's recipe in the tests."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def frame_mean_net(frames: int = 12, channels: int = 8, classes: int = 5, seed: int = 3,
                   opset: int = 13) -> onnx.ModelProto:
    """``[T, C] -> [1, T, 1, C]`` (a per-channel scale on it) ``-> Squeeze(0) -> [T, 1, C]``,
    an FC per frame (an int8 MatMul whose lifted input would be 4-D: the lift leaves it at batch
    T), then a mean over the frames (axis 0) into an FC: the beats TCN's tempo head."""
    rng = np.random.default_rng(seed)
    inits = {"axes02": np.array([0, 2], np.int64), "axis0": np.array([0], np.int64),
             "gain": np.linspace(0.5, 1.5, channels, dtype=np.float32),
             "w1": _w(rng, channels, channels), "b1": np.full(channels, 0.1, np.float32),
             "w2": _w(rng, channels, classes), "b2": np.full(classes, 0.05, np.float32)}
    mean_axes = {"axes": [0]} if opset < 18 else {}
    mean_inputs = ["h1"] + (["axis0"] if opset >= 18 else [])
    nodes = [helper.make_node("Unsqueeze", ["x", "axes02"], ["x4"], name="to_image"),
             helper.make_node("Mul", ["x4", "gain"], ["g"], name="gain"),
             helper.make_node("Squeeze", ["g", "axis0"], ["f"], name="to_frames"),
             helper.make_node("MatMul", ["f", "w1"], ["m1"], name="fc1"),
             helper.make_node("Add", ["m1", "b1"], ["h1"], name="fc1_bias"),
             helper.make_node("ReduceMean", mean_inputs, ["mean"], name="mean_frames",
                              keepdims=0, **mean_axes),
             helper.make_node("MatMul", ["mean", "w2"], ["m2"], name="fc2"),
             helper.make_node("Add", ["m2", "b2"], ["y"], name="fc2_bias")]
    graph = helper.make_graph(
        nodes, "frame_mean", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [frames, channels])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def converted(model: onnx.ModelProto, out: Path, seed: int = 1):
    """``model`` converted in int8 by our recipe, calibrated on 8 seeded inputs of its shape."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    calibration = {"x": rng.standard_normal([8] + shape).astype(np.float32)}
    return mrvl_convert.convert(model, out, shapes={"x": shape},
                                quantize=Quantization(calibration))


def feeds(model: onnx.ModelProto, count: int = 3, seed: int = 2) -> List[Dict[str, np.ndarray]]:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]
