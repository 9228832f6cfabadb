"""``--keep-fp32 auto`` on a model whose own norm squares overflow fp16: the norm is scaled by a
power of two (frontend/norm_range.py), nothing moves to the CPU, verify passes (on main it kept
the norm's nodes in fp32 on the CPU)."""
from __future__ import annotations

import json

import onnx

from mrvl_convert.tune.keep_fp32 import convert_keep_fp32
from mrvl_convert.verify.compare import compare
from support.norm_models import NORM, norm_model


def test_auto_scales_the_overflowing_norm_instead_of_keeping_it(tmp_path):
    path = tmp_path / "norm.onnx"
    onnx.save(norm_model("t5"), path)
    result = convert_keep_fp32(path, tmp_path / "art", "auto")
    assert result.before["passed"] is False
    assert result.kept == [] and list(result.norm_scales) == [NORM]
    assert result.after["passed"] is True
    assert result.rounds[0]["layer"] == "(norm range)" and result.rounds[0]["nodes"] == [NORM]
    assert result.held_out is not None and result.held_out["after"]["passed"] is True
    report = json.loads((tmp_path / "art" / "report.json").read_text())
    assert report["summary"]["mrvl_subgraphs"] == 1 and report["summary"]["cpu_subgraphs"] == 0
    assert compare(path, tmp_path / "art").passed
    assert "1 norm(s) scaled" in result.line() and "-> PASS" in result.line()


def test_cli_auto_converts_with_the_scales(tmp_path, capsys):
    """mrvl-convert --keep-fp32 auto: the artifact it writes has the norm scaled (it converts
    again after choosing: the scales go with the options) and passes."""
    from mrvl_convert.cli.convert import main

    path = tmp_path / "norm.onnx"
    onnx.save(norm_model("t5"), path)
    code = main([str(path), "-o", str(tmp_path / "out"), "--keep-fp32", "auto", "--verify"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    line = next(x for x in printed.splitlines() if x.startswith("keep-fp32 "))
    assert "1 norm(s) scaled" in line and "nothing kept" in line and "-> PASS" in line
    report = json.loads((tmp_path / "out" / "norm" / "report.json").read_text())
    said = next(e for e in report["nodes"] if e["name"] == NORM)
    assert "frontend/norm_range.py" in said["canonical"]
