"""Artifact names derived from model and graph names (frontend/names.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.frontend.names import MAX_NAME, safe_name

CLI = os.path.join(os.path.dirname(sys.executable), "mrvl-convert")


def _cnn(graph_name: str = "cnn") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, graph_name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("text", ["-lead", ".hidden", "--x", "-", "..", "a/../b", "x" * 300,
                                  "é" * 100, "a b\tc\n" * 50, "CON", "_"])
def test_safe_names_are_bounded_and_plain(text):
    name = safe_name(text)
    assert 1 <= len(name) <= MAX_NAME
    assert name[0] not in "-." and "/" not in name and name not in (".", "..")
    assert all(c.isascii() and (c.isalnum() or c in "_.-") for c in name)
    assert safe_name(name) == name


def test_long_names_sharing_a_beginning_stay_distinct():
    a, b = "m" * 200 + "_a", "m" * 200 + "_b"
    assert safe_name(a) != safe_name(b)
    assert len(safe_name(a)) == MAX_NAME


def test_ordinary_names_are_unchanged(tmp_path):
    assert safe_name("resnet50-v1.7") == "resnet50-v1.7"
    result = mrvl_convert.convert(_cnn(), tmp_path / "out", name="resnet50")
    assert "name_original" not in result.manifest["model"]


def _check_artifact(directory, name_original):
    manifest = json.loads((directory / "manifest.json").read_text())
    name = manifest["model"]["name"]
    assert len(name) <= MAX_NAME and name[0] not in "-."
    assert manifest["model"]["name_original"] == name_original
    for path in directory.iterdir():
        assert len(path.name.encode()) < 255 and not path.name.startswith("-")
    session = mrvl_convert.HybridSession(directory)
    out = session.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
    assert out[0].shape == (1, 4, 8, 8)


def test_cli_converts_files_with_long_and_leading_dash_names(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    long_stem, dash_stem = "n" * 240, "-lead"
    for stem in (long_stem, long_stem[:-1] + "m", dash_stem):
        onnx.save(_cnn(), str(models / f"{stem}.onnx"))
    paths = sorted(str(p) for p in models.iterdir())
    done = subprocess.run([CLI, *paths, "-o", str(tmp_path / "out"), "-q"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    dirs = sorted(p for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert len(dirs) == 3 and len({p.name for p in dirs}) == 3
    originals = set()
    for directory in dirs:
        manifest = json.loads((directory / "manifest.json").read_text())
        originals.add(manifest["model"]["name_original"])
        _check_artifact(directory, manifest["model"]["name_original"])
    assert originals == {long_stem, long_stem[:-1] + "m", dash_stem}
    assert (tmp_path / "out" / "lead").is_dir()


def test_convert_takes_a_huge_graph_name_and_a_leading_dash_file(tmp_path):
    graph_name = "g" * 10_000
    result = mrvl_convert.convert(_cnn(graph_name), tmp_path / "proto")
    assert len(result.model_name) <= MAX_NAME
    _check_artifact(tmp_path / "proto", graph_name)
    path = tmp_path / "-lead.onnx"
    onnx.save(_cnn(), str(path))
    result = mrvl_convert.convert(str(path), tmp_path / "file")
    assert result.model_name == "lead"
    _check_artifact(tmp_path / "file", "-lead")
