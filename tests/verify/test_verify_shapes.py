"""Verify runs at the shapes the artifact was converted for (issue 40, finding 2): a model
declaring a static input [10, 3, 8, 8] converted with --input-shape x:1,3,16,16 is verified at
[1, 3, 16, 16], the reference model given the same override; it used to stop with "has shape
[10, 3, 8, 8] but the artifact ... was converted for [1, 3, 16, 16]" and no figures."""
from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.cli.convert import main as convert_main
from mrvl_convert.cli.verify import main as verify_main
from mrvl_convert.errors import InputShapeOverrideWarning, ShapeError


def _model(path, batch=10, scale=1.0):
    w = np.random.default_rng(4).standard_normal((4, 3, 3, 3)).astype(np.float32) * scale
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_convert_verify_at_the_given_shape(tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    code = convert_main([str(model), "-o", str(out), "--input-shape", "x:1,3,16,16",
                         "--verify"])
    text = capsys.readouterr()
    assert code == 0, text.out + text.err
    row = json.loads((out / "summary.json").read_text())["models"][0]
    assert row["verified"] is True
    figures = row["verify"]["outputs"][0]
    assert figures["tensor"] == "y" and figures["max_abs"] is not None


@pytest.fixture(scope="module")
def overridden(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shapes")
    model = _model(tmp / "m.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputShapeOverrideWarning)
        mrvl_convert.convert(str(model), tmp / "out", shapes={"x": [1, 3, 16, 16]})
    return tmp


def test_compare_at_the_given_shape(overridden):
    report = mrvl_convert.compare(str(overridden / "m.onnx"), overridden / "out", samples=2)
    assert report.passed
    assert [r.shape for r in report.judged_rows] == [[1, 4, 16, 16]]
    assert report.judged_rows[0].max_abs is not None


def test_mrvl_verify_at_the_given_shape(overridden, capsys):
    assert verify_main([str(overridden / "m.onnx"), str(overridden / "out"),
                        "--samples", "2"]) == 0
    assert "PASS: 1/1 outputs" in capsys.readouterr().out


def test_wrong_weights_at_the_given_shape_still_fail(overridden, capsys):
    other = _model(overridden / "other.onnx", scale=100.0)
    assert verify_main([str(other), str(overridden / "out"), "--samples", "2"]) == 3


def test_a_model_declaring_other_dims_is_still_refused(overridden):
    other = _model(overridden / "b5.onnx", batch=5)
    with pytest.raises(ShapeError, match="has shape"):
        mrvl_convert.compare(str(other), overridden / "out", samples=1)
