"""Issue 43 finding 8: the held-out figure of ``--keep-fp16 auto --min-agreement`` is the
artifact's. Every calibration run records the samples it saw (by their bytes); the trials and
the artifact see only the choice rows, never a held-out row, and the artifact is the very model
the figure was measured on."""
from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from typing import List, Set

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.cli.convert import main
from mrvl_convert.core.samples import calibration_split
from mrvl_convert.quantize import Quantization
from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16
from support.models import Builder

# The module, not the function the package exports under the same name.
recipe = importlib.import_module("mrvl_convert.quantize.recipe")


def _model() -> onnx.ModelProto:
    """conv1 (one outlier weight, so int8 loses the argmax) -> conv2, y [1, 6, 8, 8]."""
    b = Builder(seed=0, opset=13)
    x = b.input("x", [1, 3, 8, 8])
    w1 = (b.rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w1[0, 2, 1, 1] = 50.0
    c1 = b.op("Conv", [x, b.const(w1)], name="conv1", pads=[1] * 4, kernel_shape=[3, 3])
    return b.model([b.op("Conv", [c1, b.weight(6, 8, 1, 1, scale=0.3)], name="conv2",
                         kernel_shape=[1, 1])])


def _data(count: int = 16) -> np.ndarray:
    x = np.random.default_rng(1).standard_normal((count, 3, 8, 8)).astype(np.float32)
    x[:, 2] *= 0.01
    return x


def _hashes(rows: np.ndarray) -> Set[str]:
    return {hashlib.sha256(np.ascontiguousarray(r).tobytes()).hexdigest() for r in rows}


@pytest.fixture
def seen(monkeypatch) -> List[Set[str]]:
    """The samples each calibration run fed to the quantizer, one set of row hashes per run."""
    runs: List[Set[str]] = []
    original = recipe.calibration_feeds

    def recording(proto, calibration, label):
        runs.append(_hashes(np.asarray(calibration["x"])))
        return original(proto, calibration, label)

    monkeypatch.setattr(recipe, "calibration_feeds", recording)
    return runs


def test_trials_and_the_artifact_see_only_the_choice_rows(tmp_path, seen) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_model(), src)
    x = _data()
    result = quantize_keep_fp16(src, tmp_path / "keep.onnx", {"x": x}, "auto",
                                min_agreement=0.99, threshold_db=-100.0, max_rounds=2)
    chosen, held = set(result.calibration_rows), set(result.held_out_rows)
    assert chosen and held and not chosen & held and chosen | held == set(range(len(x)))
    assert len(held) == result.held_out_samples
    trials = list(seen)
    assert trials and all(run == _hashes(x[sorted(chosen)]) for run in trials)
    assert not any(run & _hashes(x[sorted(held)]) for run in trials)
    # The artifact, calibrated on the same rows, is the model the held-out figure is of.
    seen.clear()
    artifact = mrvl_convert.convert(src, tmp_path / "a", quantize=result.quantization(
        Quantization({"x": x}, rows=tuple(result.calibration_rows))))
    assert seen and all(run == _hashes(x[sorted(chosen)]) for run in seen)
    qdq = (tmp_path / "a" / artifact.manifest["quantization"]["file"]).read_bytes()
    assert hashlib.sha256(qdq).hexdigest() == hashlib.sha256(
        result.model.read_bytes()).hexdigest()


def test_the_cli_artifact_is_calibrated_on_the_rows_its_manifest_names(tmp_path, seen,
                                                                       monkeypatch) -> None:
    feeds = importlib.import_module("mrvl_convert.verify.feeds")
    judged: List[Set[str]] = []  # the calibration rows --verify judges on
    original = feeds.stacked_feeds

    def recording(arrays, specs, label):
        judged.append(_hashes(np.asarray(arrays["x"])))
        return original(arrays, specs, label)

    monkeypatch.setattr(feeds, "stacked_feeds", recording)
    src = tmp_path / "m.onnx"
    onnx.save(_model(), src)
    x = _data()
    np.savez(tmp_path / "cal.npz", x=x)
    code = main([str(src), "-o", str(tmp_path / "out"), "--quantize", "int8", "--calibration",
                 str(tmp_path / "cal.npz"), "--keep-fp16", "auto", "--min-agreement", "0.99",
                 "--snr-threshold", "-100", "--jobs", "1", "--quiet", "--verify"])
    assert code == 0
    quantization = json.loads((tmp_path / "out" / "m" / "manifest.json").read_text()
                              )["quantization"]
    auto = quantization["keep_fp16_auto"]
    chosen, held = set(auto["calibration_rows"]), set(auto["held_out_rows"])
    verify_rows = set(calibration_split(len(x)).judge)  # what --verify judges on
    assert chosen and held and not chosen & held and not (chosen | held) & verify_rows
    assert chosen | held | verify_rows == set(range(len(x)))
    assert quantization["calibration"]["samples"] == len(chosen)
    # Every calibration run, the trials' and the artifact's, saw the choice rows only.
    assert len(seen) >= 2 and all(run == _hashes(x[sorted(chosen)]) for run in seen)
    # --verify judged on rows that neither calibrated nor chose.
    assert judged == [_hashes(x[sorted(verify_rows)])]
