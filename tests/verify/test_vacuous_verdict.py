"""A verdict is over what was compared (issue 40, finding 1): an artifact output the reference
model does not have fails the verdict, named, instead of counting as passed; no output compared
is no PASS. A re-export of the model with its output renamed and its weights 100x larger used to
PASS with nothing compared."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.cli.verify import main as verify_main
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.verify.report import Comparison, Row


def _model(output: str = "y", scale: float = 1.0) -> onnx.ModelProto:
    w = np.random.default_rng(4).standard_normal((4, 3, 3, 3)).astype(np.float32) * scale
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], [output], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def fp16(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vacuous")
    onnx.save(_model(), str(tmp / "model.onnx"))
    onnx.save(_model("renamed", 100.0), str(tmp / "other.onnx"))
    mrvl_convert.convert(str(tmp / "model.onnx"), tmp / "out")
    return tmp


def test_renamed_output_fails_in_python(fp16):
    report = mrvl_convert.compare(str(fp16 / "other.onnx"), fp16 / "out", samples=2)
    assert not report.passed
    assert report.not_compared == ["y"]
    assert "output(s) not compared: y" in report.summary_line()
    assert "FAIL: output(s) not compared: y" in report.format_table()


@pytest.mark.parametrize("criterion", ["ours", "marvell"])
def test_renamed_output_fails_mrvl_verify(fp16, capsys, criterion):
    code = verify_main([str(fp16 / "other.onnx"), str(fp16 / "out"), "--samples", "2",
                        "--criterion", criterion])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "PASS" not in out and "output(s) not compared: y" in out


def test_the_source_model_still_passes(fp16, capsys):
    assert verify_main([str(fp16 / "model.onnx"), str(fp16 / "out"), "--samples", "2"]) == 0
    assert "PASS: 1/1 outputs" in capsys.readouterr().out


def test_int8_renamed_qdq_model_fails(tmp_path, capsys):
    onnx.save(_model(), str(tmp_path / "model.onnx"))
    onnx.save(_model("renamed", 100.0), str(tmp_path / "other.onnx"))
    data = {"x": np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)}
    qdq = quantize_int8(tmp_path / "model.onnx", tmp_path / "q.onnx", data)
    other = quantize_int8(tmp_path / "other.onnx", tmp_path / "q_other.onnx", data)
    mrvl_convert.convert(str(qdq), tmp_path / "out")
    report = mrvl_convert.compare(str(other), tmp_path / "out", samples=2)
    assert not report.passed and report.not_compared == ["y"]
    assert verify_main([str(other), str(tmp_path / "out"), "--samples", "2"]) == 3
    assert "output(s) not compared: y" in capsys.readouterr().out


def test_no_output_compared_is_no_pass():
    assert not Comparison([Row("b", "boundary", [1])], 1).passed
    assert "no output was compared" in Comparison([], 1).format_table()
