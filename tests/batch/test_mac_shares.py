"""Issue 39: summary.json gives each model's MAC share in int8 on the accelerator, in fp16 on the
accelerator and on the CPU (report.json ``precision``, ``emit/mac_shares.py``)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from mrvl_convert.batch import convert_many
from mrvl_convert.quantize import Quantization
from support.models import small_cnn

# small_cnn's MACs, counted from its shapes: Conv 3->8 3x3 on 16x16, Conv 8->4 3x3 on 8x8,
# Gemm 64->16, Gemm 16->10.
CONV1, CONV2, FC1, FC2 = 16 * 16 * 8 * 27, 8 * 8 * 4 * 72, 64 * 16, 16 * 10
TOTAL = CONV1 + CONV2 + FC1 + FC2


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "cnn.onnx"
    onnx.save(small_cnn(), path)
    return path


def _row(path, out, **options):
    result = convert_many([path], out, jobs=1, **options)
    assert result.all_ok, [o.error for o in result]
    summary = json.loads((out / "summary.json").read_text())
    report = json.loads((out / "cnn" / "report.json").read_text())
    return summary["models"][0], report


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "cal.npz"
    np.savez(path, x=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    return str(path)


def test_an_fp16_conversion_is_all_fp16(model_path, tmp_path) -> None:
    row, report = _row(model_path, tmp_path / "out")
    assert row["mac_shares"] == {"int8": 0.0, "fp16": 1.0, "cpu": 0.0}
    assert report["precision"]["macs"] == {"int8": 0, "fp16": TOTAL, "cpu": 0}
    assert report["summary"]["macs"] == TOTAL
    assert "not_int8" not in report["precision"]  # an fp16 conversion: nothing to explain


def test_an_int8_conversion_is_all_int8(model_path, calibration, tmp_path) -> None:
    row, report = _row(model_path, tmp_path / "out", quantize=Quantization(calibration))
    assert row["mac_shares"] == {"int8": 1.0, "fp16": 0.0, "cpu": 0.0}
    assert report["precision"]["not_int8"] == []


def test_a_layer_kept_in_fp16_moves_its_macs(model_path, calibration, tmp_path) -> None:
    row, report = _row(model_path, tmp_path / "out",
                       quantize=Quantization(calibration, keep_fp16=("Conv_3",)))
    assert report["precision"]["macs"] == {"int8": CONV2 + FC1 + FC2, "fp16": CONV1, "cpu": 0}
    assert row["mac_shares"]["fp16"] == round(CONV1 / TOTAL, 4)
    top = report["precision"]["not_int8"][0]
    assert top["reason"] == "kept in fp16 (--keep-fp16)" and top["nodes"] == ["Conv_3"]


def test_a_denied_layer_counts_on_cpu_with_its_reason(model_path, calibration, tmp_path) -> None:
    row, report = _row(model_path, tmp_path / "out", quantize=Quantization(calibration),
                       deny=["Gemm"])
    assert report["precision"]["macs"]["cpu"] == FC1 + FC2
    assert row["mac_shares"]["cpu"] == round((FC1 + FC2) / TOTAL, 4)
    reasons = report["precision"]["not_int8"]
    assert sum(r["macs"] for r in reasons) == FC1 + FC2
    assert all(r["placement"] == "cpu" and r["reason"].startswith("on CPU: ") for r in reasons)
    assert "Gemm" in reasons[0]["reason"]
