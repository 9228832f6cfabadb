"""The README's "Command line" section runs as written: its ```bash examples are executed in a
temporary directory holding the files they name (model.onnx, models/, images.npz), and every
option the section names is one the commands accept."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import numpy as np
import pytest

from mrvl_convert.cli.args import build_parser
from mrvl_convert.cli.verify import build_parser as build_verify_parser
from support import badmodels as bm

pytestmark = pytest.mark.system

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def blocks(text: str, language: str) -> List[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def dynamic_hw(size: int, seed: int):
    proto = bm.small_cnn(seed, size=size)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "h", "w"
    return proto


def workspace(root: Path) -> Path:
    """The files the examples name: model.onnx (input x [1,3,8,8], output y), models/ with
    three models sharing the input name x at two sizes, images.npz of real inputs."""
    bm.save(bm.small_cnn(), root / "model.onnx")
    bm.save(dynamic_hw(16, 1), root / "models" / "det_a.onnx")
    bm.save(dynamic_hw(16, 2), root / "models" / "det_b.onnx")
    bm.save(dynamic_hw(8, 3), root / "models" / "cls.onnx")
    rng = np.random.default_rng(0)
    np.savez(root / "images.npz", x=rng.standard_normal((3, 1, 3, 8, 8)).astype(np.float32))
    return root


def test_command_line_examples_run_as_written(tmp_path: Path) -> None:
    [example] = blocks(section("Command line"), "bash")
    commands = [line for line in example.splitlines() if line.strip()]
    assert len(commands) >= 4 and all(c.split()[0] in ("mrvl-convert", "mrvl-verify")
                                      for c in commands)
    root = workspace(tmp_path)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=root, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr
    out = root / "out"
    for name in ("model", "det_a", "det_b", "cls"):
        assert (out / name / "manifest.json").is_file(), name
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert sorted(r["name"] for r in summary["models"]) == ["cls", "det_a", "det_b", "model"]
    model_row = next(r for r in summary["models"] if r["name"] == "model")
    assert model_row["verify"]["samples"] == 3 and model_row["verify"]["passed"]


def test_every_option_the_section_names_exists() -> None:
    text = section("Command line")
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text)) | \
        set(re.findall(r"(?<![\w-])(-[a-z])\b", text))
    known = set()
    for parser in (build_parser(), build_verify_parser()):
        for action in parser._actions:
            known.update(action.option_strings)
    assert named and named <= known, sorted(named - known)
