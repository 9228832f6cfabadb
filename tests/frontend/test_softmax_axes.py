"""A Softmax over an axis followed only by unit axes as a last-axis Softmax of a view
(``frontend/softmax_axes.py``): bit-equal on onnxruntime, and smart-turn's attention pool over
frames (``Softmax([1, T, 1], axis=1)``) whole on Mrvl (on integ11 the Softmax was on CPU: 2 Mrvl
and 2 CPU subgraphs)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from support.int8 import quantized
from support.models import canonicalized, run_ort


def _softmax(shape, axis, opset=13) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=axis)], "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("shape, axis, opset", [
    ([1, 400, 1], 1, 13), ([2, 7, 1, 1, 1], 1, 13), ([1, 3, 9, 1], 2, 13), ([9, 1], 0, 13),
    ([1, 400, 1], -2, 13), ([1, 30, 1], 1, 11)])
def test_unit_axes_softmax_is_last_axis_bit_equal(shape, axis, opset):
    model = _softmax(shape, axis, opset)
    canonical, rewritten = canonicalized(model)
    softmax = next(n for n in canonical.graph.nodes if n.op == "Softmax")
    assert softmax.attrs["axis"] == len(softmax.inputs[0].shape) - 1
    assert "softmax" in canonical.rewritten
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 30
    got, want = run_ort(rewritten, {"x": x})["y"], run_ort(model, {"x": x})["y"]
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("shape, axis", [([1, 4, 1, 1], 1), ([1, 4, 2], 1), ([1, 4, 6], 2)])
def test_other_softmaxes_are_left(shape, axis):
    canonical, _ = canonicalized(_softmax(shape, axis))
    assert "softmax" not in canonical.rewritten
    assert [n.op for n in canonical.graph.nodes] == ["Softmax"]


def _attention_pool(frames=32, channels=16) -> onnx.ModelProto:
    """smart-turn's pool: scores = tanh(x W1) w2 + b, weights = Softmax over the frames of
    [1, T, 1], pooled = sum_t weights * x."""
    rng = np.random.default_rng(1)
    inits = {"w1": rng.standard_normal([channels, channels]) / 4,
             "w2": rng.standard_normal([channels, 1]) / 4, "b": np.array([0.1]),
             "axes": np.array([1], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
             helper.make_node("MatMul", ["t", "w2"], ["s"], name="mm2"),
             helper.make_node("Add", ["s", "b"], ["sb"], name="add"),
             helper.make_node("Softmax", ["sb"], ["a"], name="softmax", axis=1),
             helper.make_node("Mul", ["x", "a"], ["xa"], name="mul"),
             helper.make_node("ReduceSum", ["xa", "axes"], ["y"], name="pool", keepdims=0)]
    graph = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, frames,
                                                                                 channels])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels])],
        [numpy_helper.from_array(v.astype(np.int64 if k == "axes" else np.float32), k)
         for k, v in inits.items()])
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


def test_attention_pool_over_frames_is_whole_on_mrvl(tmp_path):
    model = _attention_pool()
    result = mrvl_convert.convert(model, tmp_path / "art")
    summary = result.report["summary"]
    cpu = [(e["name"], e.get("reason")) for e in result.report["nodes"]
           if e["placement"] == "cpu"]
    assert summary["mrvl_subgraphs"] == 1 and summary["cpu_nodes"] == 0, cpu
    assert mrvl_convert.compare(model, tmp_path / "art", samples=2).passed


def test_attention_pool_in_int8_is_whole_and_verifies(tmp_path):
    """The same pool quantized by Marvell's recipe (its Softmax in a float span between int8
    layers): on integ11 2 Mrvl and 1 CPU subgraphs."""
    qdq, feeds = quantized(tmp_path, _attention_pool(), [1, 32, 16])
    result = mrvl_convert.convert(qdq, tmp_path / "art")
    summary = result.report["summary"]
    assert summary["mrvl_subgraphs"] == 1 and summary["cpu_nodes"] == 0, summary
    assert mrvl_convert.compare(qdq, tmp_path / "art", feeds[:3]).passed
