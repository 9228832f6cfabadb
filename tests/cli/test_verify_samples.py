"""Default evidence that means something (issue 40, finding 3): --verify judges at least
DEFAULT_VERIFY_SAMPLES samples by default (it judged one random sample); with --calibration
data, the samples held out of calibration first (the quantizer calibrates on the others), then
random ones; with --verify-inputs, those. summary.json records how many and where from; the
verify line says it. mrvl-verify's default is the same."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.cli.convert import main
from mrvl_convert.cli.verify import main as verify_main
from mrvl_convert.core.samples import DEFAULT_VERIFY_SAMPLES, calibration_split

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_cnn"


def _model(path):
    w = np.random.default_rng(4).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _verify(out):
    return json.loads((out / "summary.json").read_text())["models"][0]["verify"]


def test_default_verify_judges_eight_random_samples(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(_model(tmp_path / "m.onnx")), "-o", str(out), "--verify"]) == 0
    figures = _verify(out)
    assert DEFAULT_VERIFY_SAMPLES >= 8
    assert figures["samples"] == DEFAULT_VERIFY_SAMPLES
    assert figures["origin"] == {"count": DEFAULT_VERIFY_SAMPLES,
                                 "from": {"random": DEFAULT_VERIFY_SAMPLES}}
    assert f"PASS over {DEFAULT_VERIFY_SAMPLES} samples: {DEFAULT_VERIFY_SAMPLES} random" in \
        capsys.readouterr().out


def test_verify_inputs_are_used_and_said(tmp_path, capsys):
    out = tmp_path / "out"
    np.savez(tmp_path / "v.npz", x=np.ones((3, 1, 3, 8, 8), np.float32))
    assert main([str(_model(tmp_path / "m.onnx")), "-o", str(out), "--verify",
                 "--verify-inputs", str(tmp_path / "v.npz")]) == 0
    assert _verify(out)["origin"] == {"count": 3, "from": {"verify_inputs": 3}}
    assert "over 3 samples: 3 from --verify-inputs" in capsys.readouterr().out


def test_int8_verify_takes_the_held_out_calibration_samples_first(tmp_path, capsys):
    images = np.load(EXAMPLE / "heldout.npz")["images"][:16]
    np.savez(tmp_path / "cal.npz", input=images)
    out = tmp_path / "out"
    assert main([str(EXAMPLE / "mnist_cnn.onnx"), "-o", str(out), "--quantize", "int8",
                 "--calibration", str(tmp_path / "cal.npz"), "--verify"]) == 0
    held = len(calibration_split(16).judge)
    assert held >= 1
    assert _verify(out)["inputs"] == "held_out_calibration+random"
    assert _verify(out)["origin"] == {
        "count": DEFAULT_VERIFY_SAMPLES,
        "from": {"held_out_calibration": held, "random": DEFAULT_VERIFY_SAMPLES - held}}
    assert (f"over {DEFAULT_VERIFY_SAMPLES} samples: {held} held out of calibration, "
            f"{DEFAULT_VERIFY_SAMPLES - held} random") in capsys.readouterr().out
    # the quantizer calibrated on the others only, and the manifest says so
    record = json.loads((out / "mnist_cnn" / "manifest.json").read_text())[
        "quantization"]["calibration"]
    assert (record["samples"], record["given"], record["held_out"]) == (16 - held, 16, held)


def test_mrvl_verify_default_samples(tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    assert main([str(model), "-o", str(tmp_path / "out"), "-q"]) == 0
    capsys.readouterr()
    assert verify_main([str(model), str(tmp_path / "out" / "m")]) == 0
    assert f"over {DEFAULT_VERIFY_SAMPLES} samples: {DEFAULT_VERIFY_SAMPLES} random" in \
        capsys.readouterr().out
