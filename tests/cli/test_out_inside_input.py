"""OUT inside a model directory, spelled through a symlink: a second run converts the same models,
not the CPU-stage ONNX files the first one wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.cli.args import find_models
from mrvl_convert.core.paths import below, real_entry

CLI = str(Path(sys.executable).with_name("mrvl-convert"))
# the summary's columns that do not change from one run of the same model to the next
STABLE = ("model", "name", "status", "out_dir", "nodes", "mrvl_nodes", "cpu_nodes",
          "mrvl_subgraphs", "cpu_subgraphs")


def conv_then_sin() -> onnx.ModelProto:
    """A Mrvl stage then a CPU stage: its artifact holds an .onnx file."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Sin", ["c"], ["y"], name="sin")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def models(tmp_path) -> Path:
    """tmp/models/cnn.onnx, and tmp/link -> models."""
    folder = tmp_path / "models"
    folder.mkdir()
    onnx.save(conv_then_sin(), str(folder / "cnn.onnx"))
    (tmp_path / "link").symlink_to("models", target_is_directory=True)
    return folder


def convert(cwd: Path, *args: str) -> Tuple[List[Tuple], List[str]]:
    done = subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    out = cwd / args[args.index("-o") + 1]
    rows = json.loads((out / "summary.json").read_text())["models"]
    return [tuple(row[k] for k in STABLE) for row in rows], sorted(p.name for p in out.iterdir())


@pytest.mark.parametrize("given,out", [("link", "models/out"), ("models", "link/out")],
                         ids=["models-through-link", "out-through-link"])
def test_a_second_run_converts_the_same_models(models, tmp_path, given, out):
    first, written = convert(tmp_path, given, "-o", out)
    assert [row[1] for row in first] == ["cnn"] and written == ["cnn", "summary.json"]
    assert any(p.suffix == ".onnx" for p in (models / "out" / "cnn").iterdir())
    second, written_again = convert(tmp_path, given, "-o", out)
    assert second == first
    assert written_again == written


def test_find_models_leaves_out_the_output_directory_however_spelled(models, tmp_path):
    (models / "out" / "cnn").mkdir(parents=True)
    (models / "out" / "cnn" / "cnn_cpu_0.onnx").write_bytes(b"")
    for given, out in [("link", models / "out"), ("models", tmp_path / "link" / "out"),
                       (str(tmp_path / "link"), Path("models/out"))]:
        found = find_models([str(tmp_path / given)], exclude=tmp_path / out)
        assert [p.name for p in found] == ["cnn.onnx"], (given, out)


def test_one_model_reached_through_two_spellings_is_converted_once(models, tmp_path):
    found = find_models([str(models), str(tmp_path / "link"),
                         str(tmp_path / "link" / "cnn.onnx")])
    assert found == [models / "cnn.onnx"]


def test_a_symlinked_file_is_a_model_of_its_own_directory(models, tmp_path):
    (models / "alias.onnx").symlink_to("cnn.onnx")
    assert [p.name for p in find_models([str(models)])] == ["alias.onnx", "cnn.onnx"]
    assert real_entry(tmp_path / "link" / "alias.onnx") == models.resolve() / "alias.onnx"
    assert below(tmp_path / "link" / "out" / "x.onnx", models / "out")
    assert not below(tmp_path / "link" / "x.onnx", models / "out")
