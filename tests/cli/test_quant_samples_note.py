"""``--quant-analysis`` says how many calibration samples it used, and why fewer than given."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from mrvl_convert.cli.quant import samples_note
from mrvl_convert.quantize.keep import analysis_feeds


def _model(path):
    import onnx
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])])
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_the_note_gives_used_and_given_counts(tmp_path) -> None:
    model = _model(tmp_path / "m.onnx")
    calibration = {"x": np.zeros((64, 3, 4, 4), np.float32)}
    feeds = analysis_feeds(model, calibration)
    note = samples_note(feeds, calibration, 8)
    assert "8 of the 64 calibration sample(s)" in note and "at most 8" in note


def test_no_note_when_every_sample_is_used(tmp_path) -> None:
    model = _model(tmp_path / "m.onnx")
    calibration = {"x": np.zeros((5, 3, 4, 4), np.float32)}
    assert samples_note(analysis_feeds(model, calibration), calibration, 8) == ""


def test_the_analysis_verdict_gives_the_count_used_and_why(tmp_path, capsys) -> None:
    """Issue 30: a 64-sample calibration set printed "over 8 sample(s)" and nothing more; the
    verdict now says the 8 are 8 of the 64 given, and why."""
    from pathlib import Path

    from mrvl_convert.cli.convert import main

    model = Path(__file__).resolve().parents[2] / "examples" / "mnist_cnn" / "mnist_cnn.onnx"
    images = np.random.default_rng(0).random((64, 1, 28, 28), dtype=np.float32)
    np.savez(tmp_path / "cal.npz", input=images)
    code = main([str(model), "-o", str(tmp_path / "out"), "--quantize", "int8", "--calibration",
                 str(tmp_path / "cal.npz"), "--quant-analysis"])
    out = capsys.readouterr().out
    assert code == 0
    assert ("layers over 8 sample(s) (8 of the 64 calibration sample(s) given: the analysis "
            "takes at most 8 feed(s))") in out
