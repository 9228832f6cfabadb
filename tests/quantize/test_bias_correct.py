"""Bias correction (``quantize/bias_correct.py``, ``--bias-correction``; issue 30): the mean
error int8 weights put on each output channel, measured and taken out of the float bias."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.errors import OptionError
from mrvl_convert.quantize.bias_correct import conv_input_means, correct_biases
from mrvl_convert.quantize.recipe import Quantization, quantize_int8


def convs(group: int = 1) -> onnx.ModelProto:
    """conv1 (3->8, one outlier weight: a coarse per-tensor step for the rest) -> conv2 (8->8,
    ``group`` groups). The input has a mean of 3, so weight rounding errors do not average out."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 3, 3, 3)) * 0.05
    w1[0, 0, 0, 0] = 1.5
    w2 = rng.standard_normal((8, 8 // group, 3, 3)) * 0.05
    w2[1, 0, 1, 1] = 1.5
    inits = {"w1": w1, "b1": np.zeros(8), "w2": w2}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Conv", ["c1", "w2"], ["y"], name="conv2", pads=[1] * 4,
                              group=group)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def samples(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (3.0 + 0.5 * rng.standard_normal((count, 3, 8, 8))).astype(np.float32)


def run(path, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_quant_qdq", "1")  # the QDQ as written
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": s[None]})[0] for s in x])


def channel_bias(qdq, src, x: np.ndarray) -> np.ndarray:
    """The int8 model's mean error per output channel against fp32, interior pixels only."""
    err = (run(qdq, x) - run(src, x))[:, :, 2:-2, 2:-2]
    return err.mean(axis=(0, 2, 3))


def test_the_mean_error_per_channel_shrinks(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(convs(), src)
    calibration = {"x": samples(32, 1)}
    plain = quantize_int8(src, tmp_path / "plain.onnx", calibration)
    corrected = quantize_int8(src, tmp_path / "bc.onnx", calibration, bias_correction=True)
    test = samples(16, 2)
    before = np.abs(channel_bias(plain, src, test)).max()
    after = np.abs(channel_bias(corrected, src, test)).max()
    assert after < 0.5 * before, (before, after)


@pytest.mark.parametrize("group", [1, 8])
def test_the_correction_is_minus_the_weight_error_times_the_input_mean(tmp_path, group):
    """Checked against the formula written out as loops, dense and depthwise."""
    model = convs(group)
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    qdq = onnx.load(str(quantize_int8(src, tmp_path / "q.onnx", {"x": samples(8, 1)})))
    feeds = [{"x": s[None]} for s in samples(8, 3)]
    means = conv_input_means(model, feeds)
    np.testing.assert_allclose(means["x"], samples(8, 3).mean(axis=(0, 2, 3)), rtol=1e-5)
    corrected = correct_biases(model, qdq, means)
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    deq = next(n for n in qdq.graph.node if n.op_type == "DequantizeLinear"
               and n.output[0] == next(c for c in qdq.graph.node if c.name == "conv2").input[1])
    w_q = inits[deq.input[0]].astype(np.float64) * float(inits[deq.input[1]])
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w2"))
    mu, per = means["c1"], w.shape[1]
    want = np.array([-sum((w_q - w)[o, c].sum() * mu[(o // (8 // group)) * per + c]
                          for c in range(per)) for o in range(8)])
    conv2 = next(n for n in corrected.graph.node if n.name == "conv2")
    bias = next(numpy_helper.to_array(t) for t in corrected.graph.initializer
                if t.name == conv2.input[2])
    np.testing.assert_allclose(bias, want.astype(np.float32), rtol=1e-5, atol=1e-7)
    assert np.abs(want).max() > 0  # a correction that can be wrong


def test_a_calibration_reader_is_refused(tmp_path):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"x": s[None]} for s in samples(4, 1)])

        def get_next(self):
            return next(self.it, None)

    src = tmp_path / "m.onnx"
    onnx.save(convs(), src)
    with pytest.raises(OptionError, match="twice"):
        quantize_int8(src, tmp_path / "q.onnx", Reader(), bias_correction=True)


def test_quantization_bias_correction_is_recorded(tmp_path):
    mrvl_convert.convert(convs(), tmp_path / "out", name="m",
                         quantize=Quantization({"x": samples(16, 1)}, bias_correction=True))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["quantization"]["bias_correction"] is True
    assert [s["kind"] for s in manifest["stages"]] == ["mrvl"]


@pytest.mark.parametrize("flag", ["--bias-correction", "--equalize"])
def test_cli_recipe_flags_need_quantize(tmp_path, capsys, flag):
    from mrvl_convert.cli.convert import main

    src = tmp_path / "m.onnx"
    onnx.save(convs(), src)
    code = main([str(src), "-o", str(tmp_path / "out"), flag])
    err = capsys.readouterr().err
    assert code == 2 and f"{flag} is only used with --quantize int8" in err


def test_cli_bias_correction_and_equalize_reach_the_manifest(tmp_path, capsys):
    from mrvl_convert.cli.convert import main

    src = tmp_path / "m.onnx"
    onnx.save(convs(), src)
    np.savez(tmp_path / "cal.npz", x=samples(16, 1))
    code = main([str(src), "-o", str(tmp_path / "out"), "--quantize", "int8", "--calibration",
                 str(tmp_path / "cal.npz"), "--bias-correction", "--equalize", "--quiet"])
    assert code == 0, capsys.readouterr().err
    section = json.loads((tmp_path / "out" / "m" / "manifest.json").read_text())["quantization"]
    assert section["bias_correction"] is True and section["equalize"] is True
