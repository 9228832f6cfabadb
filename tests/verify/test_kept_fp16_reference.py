"""``verify/kept_fp16.py``: the reference an int8 artifact's fp16 layers are judged against
rounds where the layers round, and nowhere else. The rewritten model is run on onnxruntime and
compared with the same arithmetic written out in numpy with every fp16 rounding explicit."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.verify.kept_fp16 import round_groups
from support.models import run_ort


def r16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def _model(w, b, alpha=0.2, beta=0.5):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("HardSigmoid", ["c"], ["y"], name="hs", alpha=alpha, beta=beta)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _conv(w, b):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])], "c",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 3, 4, 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_rounds_inputs_weights_results_and_hardsigmoid_steps():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32) * 1.7
    b = rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32) * 3.1
    model = _model(w, b)
    rounded = onnx.ModelProto()
    rounded.CopyFrom(model)
    assert round_groups(rounded, [["conv"], ["hs"]]) == ["conv", "hs"]
    onnx.checker.check_model(rounded)
    got = run_ort(rounded, {"x": x})["y"]
    # the same arithmetic, every fp16 rounding explicit: the Conv on onnxruntime in float32
    conv = r16(run_ort(_conv(r16(w), r16(b)), {"x": r16(x)})["c"])
    m = r16(conv * r16(0.2))
    a = r16(m + r16(0.5))
    want = r16(np.clip(a, 0.0, 1.0))
    np.testing.assert_array_equal(got, want)
    # and it is not the float32 run: the rounding is what the rewrite adds
    assert not np.array_equal(got, run_ort(model, {"x": x})["y"])
    # the bound: each rounding 2^-11 relative, a few of them
    assert np.abs(got - run_ort(model, {"x": x})["y"]).max() <= 16 * 2.0 ** -11


def test_an_exact_layers_result_is_read_unrounded():
    """An input the artifact hands the layer in float32 (a dequantizing quant layer's
    result) is not rounded; the weights and the results still are."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32) * 1.7
    b = rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32) * 3.1
    rounded = _model(w, b)
    assert round_groups(rounded, [["conv"], ["hs"]], [{"x"}, set()]) == ["conv", "hs"]
    got = run_ort(rounded, {"x": x})["y"]
    conv = r16(run_ort(_conv(r16(w), r16(b)), {"x": x})["c"])
    want = r16(np.clip(r16(r16(conv * r16(0.2)) + r16(0.5)), 0.0, 1.0))
    np.testing.assert_array_equal(got, want)
    assert not any(n.op_type == "Cast" and n.input[0] == "x" for n in rounded.graph.node)


def test_no_group_changes_nothing():
    rng = np.random.default_rng(3)
    model = _model(rng.standard_normal((3, 2, 3, 3)).astype(np.float32),
                   rng.standard_normal(3).astype(np.float32))
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    assert round_groups(copy, []) == [] and copy == model
