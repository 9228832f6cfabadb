"""An int8 mean over frames on the 4-D view its layer takes (``frontend/int8_means.py``; madmom's
beats TCN in int8). On main the mean over axis 0 that the lift left at batch T stayed on CPU
("it reduces the batch axis 0 of a 3-D tensor": 2 Mrvl subgraphs, fits no), and a lifted
``[T, C]`` mean, a 3-D int8 mean, stopped the conversion ("expected rank 4")."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

import mrvl_convert
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.int8_means import int8_means_on_4d
from mrvl_convert.frontend.qdq import dedicate_dequantize
from support.int8_frames import converted, feeds, frame_mean_net
from support.models import run_ort
from support.strategies.seqaxis import sequence_from_spec


def _assert_bit_equal(result, model) -> None:
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds(model), with_floor=False)
    assert comparison.passed, comparison.summary_line()
    assert all(row.max_abs == 0 for row in comparison.judged_rows), comparison.summary_line()


@pytest.mark.parametrize("opset", [13, 18])  # the mean's axes an attribute, then an input
def test_an_int8_mean_over_frames_the_lift_left_runs_whole(tmp_path, opset):
    model = frame_mean_net(opset=opset)
    result = converted(model, tmp_path / "int8")
    cpu = {n["name"] for n in result.report["nodes"] if n["placement"] == "cpu"}
    assert cpu == {"to_image"}  # the lift of the batchless input alone, as in fp16
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 1)
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    mean = next(n for n in result.report["nodes"] if n["name"] == "mean_frames")
    # seq_first.py may take the per-frame FC onto [1, T, C] first: then the mean reduces axis 1
    # of that 3-D view (its 4-D view [B, T, C, 1]) rather than axis 0 of [T, 1, C]
    assert mean["rule"] == "mrvl.qnn_reduce_mean" and "4-D view" in mean["canonical"]
    _assert_bit_equal(result, model)


def test_the_rewrite_computes_what_the_qdq_model_did(tmp_path):
    """onnxruntime on the QDQ model before and after the pass: bit-equal outputs (the pairs it
    adds are exact; the mean of 12 terms summed in one order both times)."""
    result = converted(frame_mean_net(), tmp_path / "int8")
    qdq = onnx.load(str(result.out_dir / result.manifest["quantization"]["file"]))
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(qdq))
    dedicate_dequantize(graph)
    done = Rewrites()
    assert int8_means_on_4d(graph, 13, done)
    assert list(done.rewritten) == ["mean_frames"]
    after = gs.export_onnx(graph.cleanup().toposort(), do_type_check=False)
    after.ir_version = qdq.ir_version
    means = [n for n in after.graph.node if n.op_type == "ReduceMean"]
    assert len(means) == 1 and means[0].input[0].endswith("_dq")
    for feed in feeds(frame_mean_net()):
        np.testing.assert_array_equal(run_ort(after, feed, optimize=False)["y"],
                                      run_ort(qdq, feed, optimize=False)["y"])


def test_a_float_mean_over_frames_is_left_alone():
    graph = gs.import_onnx(frame_mean_net())
    assert not int8_means_on_4d(graph, 13, Rewrites())


def test_a_lifted_int8_mean_of_frames_of_channels_converts_and_is_bit_equal(tmp_path):
    """``[T, C]`` mean over frames, lifted to ``[1, T, C]`` by the sequence lift: a 3-D int8
    mean, computed on ``[1, T, C, 1]`` (main stopped: the int8 mean's kernel takes 4-D)."""
    spec = {"seed": 5, "frames": 40, "bins": 6, "channels": 8, "windows": 0, "dilation": 1,
            "stack_axis": 1, "per_frame": ["elu"], "mean": True}
    model = sequence_from_spec(spec).model
    rng = np.random.default_rng(1)
    result = mrvl_convert.convert(
        model, tmp_path / "int8", shapes={"x": [40, 6]},
        quantize=mrvl_convert.quantize.Quantization(
            {"x": rng.standard_normal((8, 40, 6)).astype(np.float32)}))
    mean = next(n for n in result.report["nodes"] if n["name"] == "mean_frames")
    assert mean["placement"] == "mrvl" and mean["rule"] == "mrvl.qnn_reduce_mean"
    assert result.summary["mrvl_subgraphs"] == 1
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    samples = [{"x": rng.standard_normal((40, 6)).astype(np.float32)} for _ in range(3)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, samples, with_floor=False)
    assert comparison.passed and all(r.max_abs == 0 for r in comparison.judged_rows), \
        comparison.summary_line()


def _token_mean(axis: int) -> onnx.ModelProto:
    """``[1, T, C]`` tokens, an FC, an int8 mean over the tokens (1) or the channels (2), an FC."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(4)
    w1 = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
    w2 = (rng.standard_normal((16 if axis == 1 else 1, 4)) / 4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("ReduceMean", ["h"], ["m"], name="mean", axes=[axis], keepdims=1),
             helper.make_node("MatMul", ["m", "w2"], ["y"], name="fc2")]
    out = [1, 1, 4] if axis == 1 else [1, 8, 4]
    graph = helper.make_graph(
        nodes, "tokens", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


@pytest.mark.parametrize("axis", [1, 2])
def test_a_3d_int8_mean_of_tokens_runs_on_its_4d_view(tmp_path, axis):
    """main: the int8 rule took the 3-D mean, its kernel refused it ("expected rank 4")."""
    from support.int8 import converted_int8
    model = _token_mean(axis)
    result, qdq = converted_int8(model, tmp_path / "int8")
    mean = next(n for n in result.report["nodes"] if n["name"] == "mean")
    assert mean["rule"] == "mrvl.qnn_reduce_mean" and "[B, T, C, 1]" in mean["canonical"]
    rng = np.random.default_rng(6)
    samples = [{"x": rng.uniform(-1, 1, (1, 8, 16)).astype(np.float32)} for _ in range(3)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, samples, with_floor=False)
    assert comparison.passed and all(r.max_abs == 0 for r in comparison.judged_rows), \
        comparison.summary_line()
