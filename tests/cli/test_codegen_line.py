"""Issue 40: mrvl-convert says per model which codegen its artifact needs: the table's codegen
column, a line naming the kinds beyond upstream TVM v0.19's, and the count on the last line;
summary.json's ``codegen`` the same."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx

from mrvl_convert.cli.convert import main
from support.models import Builder

REF = Path(__file__).parents[1] / "data" / "reference"


def _sigmoid_head(path: Path) -> Path:
    b = Builder(seed=3)
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("Relu", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])], name="relu")
    onnx.save(b.model([b.op("Sigmoid", [y], name="head")]), path)
    return path


def test_the_command_names_the_codegen_each_model_needs(tmp_path, capsys) -> None:
    shutil.copy(REF / "rfc_fashion_cnn.onnx", tmp_path / "rfc.onnx")
    models = [str(tmp_path / "rfc.onnx"), str(_sigmoid_head(tmp_path / "gated.onnx"))]
    assert main([*models, "-o", str(tmp_path / "out"), "-j", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split()[:1] in (["rfc"], ["gated"]) and "ok" in line.split()}
    assert rows["rfc"][8] == "v0.19" and rows["gated"][8] == "marvell"
    assert "gated: needs the newer Marvell codegen (--layer-set marvell) for Sigmoid x1:" in out
    assert "rfc: needs" not in out
    assert "2 models converted into" in out and "1 of them needs only upstream TVM v0.19's" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    codegen = {m["name"]: m["codegen"] for m in summary["models"]}
    assert codegen["rfc"] == {"layer_set": "upstream-0.19", "beyond_upstream": []}
    assert codegen["gated"] == {"layer_set": "marvell", "beyond_upstream": ["Sigmoid"]}
