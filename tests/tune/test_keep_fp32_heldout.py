"""``--keep-fp32 auto`` judged out of sample (issue 40, finding 3): the layers are chosen on one
split of the verify samples (``remedy_split``) and the verdict is reported on the other; the
line says both. It used to print "verify FAIL -> PASS" on the sample that chose."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from mrvl_convert.cli.convert import main
from mrvl_convert.core.samples import DEFAULT_VERIFY_SAMPLES, remedy_split
from mrvl_convert.tune.keep_fp32 import VerifySettings, convert_keep_fp32
from support.fp16_sensitive import cancelling_model


@pytest.fixture()
def model(tmp_path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(cancelling_model(), path)
    return path


def test_auto_reports_the_choice_split_and_the_held_out_verdict(model):
    split = remedy_split(DEFAULT_VERIFY_SAMPLES)
    chosen, held = len(split.choose), len(split.judge)
    assert chosen and held
    result = convert_keep_fp32(model, None, "auto")
    assert result.chosen_on == chosen and result.held_out["samples"] == held
    assert result.held_out["before"]["passed"] is False
    assert result.held_out["after"]["passed"] is True
    assert f"over {held} samples" in result.held_out["after"]["line"]
    assert f"over {chosen} samples" in result.after["line"]
    line = result.line()
    assert re.search(rf"chosen on {chosen} samples: verify FAIL \(max_rel [^)]+\) -> PASS "
                     rf"\(max_rel [^)]+\); held out {held} samples: FAIL \(max_rel [^)]+\) -> "
                     r"PASS \(max_rel [^)]+\)$", line), line


def test_the_held_out_samples_are_not_the_ones_that_chose(model):
    feeds = [{"x": np.full((1, 2, 8, 8), float(k), np.float32)} for k in range(6)]
    settings = VerifySettings(inputs=feeds)
    choose, judge = settings.split(Path("unused"))
    assert len(choose.inputs) + len(judge.inputs) == 6
    values = {float(f["x"].flat[0]) for f in choose.inputs}
    assert values.isdisjoint(float(f["x"].flat[0]) for f in judge.inputs)


def test_cli_line_and_report_say_both(model, tmp_path, capsys):
    x = np.random.default_rng(5).standard_normal((6, 1, 2, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code = main([str(model), "-o", str(tmp_path / "out"), "--keep-fp32", "auto",
                 "--verify", "--verify-inputs", str(tmp_path / "in.npz")])
    out = capsys.readouterr().out
    assert code == 0, out
    split = remedy_split(6)
    assert (f"chosen on {len(split.choose)} samples: verify FAIL" in out
            and f"held out {len(split.judge)} samples: FAIL" in out), out
    measured = json.loads((tmp_path / "out" / "m" / "report.json").read_text()
                          )["keep_fp32"]["measured"]
    assert measured["chosen_on"] == len(split.choose)
    assert measured["held_out"]["samples"] == len(split.judge)
    assert measured["held_out"]["after"]["passed"] is True
