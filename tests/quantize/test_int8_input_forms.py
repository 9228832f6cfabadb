"""int8 calibration feeds each input as the model declares it (issue 45, real corpus): a uint8
image or int64 token ids in their own type, not float32; and at the user's pinned shapes, so a
``[frames, bins]`` input pinned to ``[6, 4]`` takes six rows a feed, not one."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.core.samples import calibration_split
from mrvl_convert.errors import InputFeedError
from mrvl_convert.quantize.recipe import Quantization, quantize_int8

RNG = np.random.default_rng(45)


def _model(nodes, inputs, inits, out_shape) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def uint8_image() -> onnx.ModelProto:
    """A uint8 NHWC image, cast and scaled to float, then a Conv (sscd_distilled's front)."""
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Transpose", ["xf"], ["xt"], perm=[0, 3, 1, 2]),
             helper.make_node("Mul", ["xt", "s"], ["xs"]),
             helper.make_node("Conv", ["xs", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    inits = {"s": np.array(1 / 255, np.float32),
             "w": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32),
             "b": RNG.standard_normal(4).astype(np.float32)}
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 8, 3])],
                  inits, [1, 4, 8, 8])


def int64_ids() -> onnx.ModelProto:
    """int64 token ids into an embedding table (attacut's front), then a MatMul."""
    nodes = [helper.make_node("Gather", ["table", "x"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["y"])]
    inits = {"table": RNG.standard_normal((20, 8)).astype(np.float32),
             "w": RNG.standard_normal((8, 5)).astype(np.float32)}
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.INT64, [1, 6])],
                  inits, [1, 6, 5])


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("build, samples", [
    (uint8_image, RNG.integers(0, 256, (6, 8, 8, 3)).astype(np.uint8)),
    (uint8_image, RNG.integers(0, 256, (6, 8, 8, 3)).astype(np.float32)),  # integral floats
    (int64_ids, RNG.integers(0, 20, (6, 6)).astype(np.int64)),
    (int64_ids, RNG.integers(0, 20, (6, 6)).astype(np.int32)),
], ids=["uint8", "uint8-from-float", "int64", "int64-from-int32"])
def test_integer_inputs_calibrate_in_their_own_type(tmp_path, build, samples):
    """On main every sample was cast to float32 and onnxruntime refused the feed."""
    src = _save(build(), tmp_path / "m.onnx")
    qdq = quantize_int8(src, tmp_path / "q.onnx", {"x": samples})
    session = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])
    feed = samples[:1].astype(onnx.helper.tensor_dtype_to_np_dtype(
        onnx.load(str(src)).graph.input[0].type.tensor_type.elem_type))
    assert np.isfinite(session.run(None, {"x": feed})[0]).all()


@pytest.mark.parametrize("build, bad, shown", [
    (uint8_image, 300.0, "300"), (uint8_image, 0.5, "0.5"), (uint8_image, -1.0, "-1"),
    (int64_ids, 2.5, "2.5"), (int64_ids, 1e30, r"1e\+30"),
])
def test_a_sample_the_input_type_cannot_hold_is_refused(tmp_path, build, bad, shown):
    src = _save(build(), tmp_path / "m.onnx")
    shape = [d.dim_value for d in build().graph.input[0].type.tensor_type.shape.dim]
    samples = np.ones([4] + shape[1:], np.float64)
    samples.reshape(-1)[3] = bad
    with pytest.raises(InputFeedError, match=rf"m\.onnx.*input 'x'.*{shown}") as caught:
        quantize_int8(src, tmp_path / "q.onnx", {"x": samples})
    assert caught.value.tensor == "x"


def test_integer_npy_calibration_file_is_read(tmp_path):
    """A directory of .npy token ids calibrates (main refused any but float arrays)."""
    src = _save(int64_ids(), tmp_path / "m.onnx")
    (tmp_path / "cal").mkdir()
    np.save(tmp_path / "cal" / "x.npy", RNG.integers(0, 20, (4, 6)))
    assert quantize_int8(src, tmp_path / "q.onnx", tmp_path / "cal").exists()


def frames_model(frames: int = 6, bins: int = 4) -> onnx.ModelProto:
    """``[frames, bins]`` with a dynamic frame count, but a head exported for ``frames``: its
    Reshape to ``[1, frames * bins]`` runs only at that many frames (as madmom's and the
    PaddleOCR rec-model's do at their pinned sizes)."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["y"])]
    inits = {"shape": np.array([1, frames * bins], np.int64),
             "w": RNG.standard_normal((frames * bins, 3)).astype(np.float32)}
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        ["frames", bins])], inits, [1, 3])


def test_pinned_shapes_calibrate_whole_samples(tmp_path):
    """Eight samples of 6 frames stacked on axis 0: held out and fed as whole [6, 4] samples
    at the pinned shape (main cut them in [1, 4] rows, which the Reshape refuses); the QDQ
    model written keeps the input (and output) as the source declares it."""
    src = _save(frames_model(), tmp_path / "m.onnx")
    samples = RNG.standard_normal((48, 4)).astype(np.float32)
    report: dict = {}
    qdq = onnx.load(str(quantize_int8(src, tmp_path / "q.onnx", {"x": samples},
                                      shapes={"x": [6, 4]}, report=report)))
    dims = qdq.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["frames", 4]
    onnx.checker.check_model(qdq, full_check=True)  # its output keeps its declared shape
    split = calibration_split(8)
    assert (report["samples"], report["held_out"]) == (len(split.choose), len(split.judge))
    # the output range is that of the chosen samples, each run whole
    session = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    whole = samples.reshape(8, 6, 4)
    peak = max(np.abs(session.run(None, {"x": whole[k]})[0]).max() for k in split.choose)
    out_scale = [numpy_helper.to_array(i) for i in qdq.graph.initializer
                 if i.name == "y_scale"][0]
    assert np.isclose(float(out_scale), peak / 127, rtol=1e-5)


def test_convert_quantizes_at_the_pinned_shapes(tmp_path):
    src = _save(frames_model(), tmp_path / "m.onnx")
    samples = RNG.standard_normal((48, 4)).astype(np.float32)
    result = mrvl_convert.convert(src, tmp_path / "out", shapes={"x": [6, 4]},
                                  quantize=Quantization({"x": samples}))
    assert result.manifest["quantization"]["calibration"]["samples"] == \
        len(calibration_split(8).choose)
    assert result.manifest["model"]["inputs"][0]["shape"] == [6, 4]
