"""The CLI's "does not fit one device" line is bounded (issue 45, tiny-pron: one line of
611 KB, a reason per tensor per subgraph): the first few reasons and how many more, every one
still in report.json ``device.reasons``."""
from __future__ import annotations

import json

import numpy as np

from mrvl_convert.cli.convert import main as cli_main
from mrvl_convert.cli.device import SHOWN_REASONS
from support.badmodels import save
from support.models import Builder


def _heads_folded(branches: int):
    """Heads reshaped into axis 0 ([12, T, d] of a batch-1 model), read by ``branches`` FC +
    Relu heads, each a model output: a batch-12 tensor per head crosses the Mrvl boundary."""
    b = Builder(seed=65, opset=13)
    y = b.op("Reshape", [b.input("x", [1, 12, 16, 8]), b.const(np.array([12, 16, 8], np.int64))],
             name="fold")
    return b.model([b.op("Relu", [b.op("MatMul", [y, b.weight(8, 8)], name=f"fc{k}")],
                         name=f"act{k}") for k in range(branches)])


def test_a_misfit_with_many_reasons_prints_a_bounded_line(tmp_path, capsys):
    path = save(_heads_folded(6), tmp_path / "heads.onnx")
    assert cli_main([str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines()
             if "does not fit one device" in line]
    reasons = json.loads((tmp_path / "out" / "heads" / "report.json").read_text())["device"]["reasons"]
    assert len(reasons) > SHOWN_REASONS + 1, reasons
    assert len(lines) == 1
    assert lines[0].count("max_batch 1") == SHOWN_REASONS, lines[0]
    assert f"and {len(reasons) - SHOWN_REASONS} more ({len(reasons)} in all" in lines[0]
    assert "report.json" in lines[0]
