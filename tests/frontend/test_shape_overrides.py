"""Given input shapes: static dims may be replaced, the rank may not (frontend/input_shapes.py,
and how mrvl-convert reports both)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.errors import InputRankError, InputShapeOverrideWarning, ShapeError

CLI = os.path.join(os.path.dirname(sys.executable), "mrvl-convert")


def _classifier(batch=10, size=32) -> onnx.ModelProto:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, declared for [batch, 3, size, size]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((2, 4)).astype(np.float32), "fw"),
             numpy_helper.from_array(np.zeros(2, np.float32), "fb")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, "cls",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_a_static_input_shape_can_be_overridden(tmp_path):
    with pytest.warns(InputShapeOverrideWarning, match=r"declared \[10, 3, 32, 32\]") as caught:
        result = mrvl_convert.convert(_classifier(), tmp_path / "out",
                                      shapes={"x": [1, 3, 320, 320]})
    assert caught[0].filename == __file__  # the user's line, not one of the package's
    model = result.manifest["model"]
    assert model["input_shape_overrides"] == {
        "x": {"declared": [10, 3, 32, 32], "used": [1, 3, 320, 320]}}
    assert model["inputs"][0]["shape"] == [1, 3, 320, 320]
    assert model["outputs"][0]["shape"] == [1, 2]
    session = mrvl_convert.HybridSession(tmp_path / "out")
    x = np.random.default_rng(1).standard_normal((1, 3, 320, 320)).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    assert y.shape == (1, 2) and np.isfinite(y).all()


def test_no_override_no_warning_no_field(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputShapeOverrideWarning)
        same = mrvl_convert.convert(_classifier(), tmp_path / "same",
                                    shapes={"x": [10, 3, 32, 32]})
        plain = mrvl_convert.convert(_classifier(), tmp_path / "plain")
    assert "input_shape_overrides" not in same.manifest["model"]
    assert "input_shape_overrides" not in plain.manifest["model"]


def test_an_override_the_model_cannot_take_is_a_shape_error(tmp_path):
    with pytest.warns(InputShapeOverrideWarning), pytest.raises(ShapeError) as info:
        mrvl_convert.convert(_classifier(), tmp_path / "out", shapes={"x": [1, 4, 32, 32]})
    assert "'x'" in str(info.value) and "does not fit" in str(info.value)


def test_a_wrong_rank_is_an_input_rank_error(tmp_path):
    with pytest.raises(InputRankError) as info:
        mrvl_convert.convert(_classifier(), tmp_path / "out", shapes={"x": [1, 3, 320]})
    assert isinstance(info.value, ShapeError)
    assert "rank 4" in str(info.value) and "rank 3" in str(info.value)


def test_cli_says_so_in_one_line_and_records_it(tmp_path):
    path = tmp_path / "cls.onnx"
    onnx.save(_classifier(), str(path))
    done = subprocess.run([CLI, str(path), "-o", str(tmp_path / "out"), "-q",
                           "--input-shape", "x:1,3,320,320"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert str(path) in lines[0] and "'x'" in lines[0] and "[10, 3, 32, 32]" in lines[0]
    assert "[1, 3, 320, 320]" in lines[0]
    manifest = json.loads((tmp_path / "out" / "cls" / "manifest.json").read_text())
    assert manifest["model"]["input_shape_overrides"]["x"]["used"] == [1, 3, 320, 320]


def test_cli_says_so_once_per_model_from_worker_processes(tmp_path):
    for stem in ("a", "b"):
        onnx.save(_classifier(), str(tmp_path / f"{stem}.onnx"))
    done = subprocess.run([CLI, str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), "-q",
                           "-j", "2", "-o", str(tmp_path / "out"),
                           "--input-shape", "x:1,3,64,64"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    assert "a.onnx" in lines[0] and "b.onnx" in lines[1]


def test_cli_wrong_rank_is_a_usage_error(tmp_path):
    path = tmp_path / "cls.onnx"
    onnx.save(_classifier(), str(path))
    done = subprocess.run([CLI, str(path), "-o", str(tmp_path / "out"), "-q",
                           "--input-shape", "x:1,3,320"], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert str(path) in lines[0] and "'x'" in lines[0]
    assert "rank 4" in lines[0] and "rank 3" in lines[0]


def _matmul_model() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.ones((8, 2), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10, 2])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_an_override_shape_inference_refuses_is_a_shape_error(tmp_path):
    with pytest.warns(InputShapeOverrideWarning), pytest.raises(ShapeError) as info:
        mrvl_convert.convert(_matmul_model(), tmp_path / "out", shapes={"x": [1, 9]})
    assert "'x'" in str(info.value) and "does not fit" in str(info.value)
    with pytest.warns(InputShapeOverrideWarning):
        result = mrvl_convert.convert(_matmul_model(), tmp_path / "ok", shapes={"x": [1, 8]})
    assert result.manifest["model"]["outputs"][0]["shape"] == [1, 2]


def test_the_manifest_schema_checks_the_overrides_field(tmp_path):
    import jsonschema
    from importlib import resources
    text = resources.files("mrvl_convert.schemas").joinpath("manifest.schema.json").read_text()
    validator = jsonschema.Draft202012Validator(json.loads(text))
    with pytest.warns(InputShapeOverrideWarning):
        result = mrvl_convert.convert(_classifier(), tmp_path / "out", shapes={"x": [1, 3, 8, 8]})
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest == json.loads(json.dumps(result.manifest))
    assert not list(validator.iter_errors(manifest))
    manifest["model"]["input_shape_overrides"]["x"]["used"] = [1, 3, 0, 8]
    assert list(validator.iter_errors(manifest))
