"""Issue 43 finding 7: the device verdict of an int8 artifact states Marvell's rules for
pre-quantized models (one accelerator region, no CPU op, one precision) and whether the artifact
meets them, and the host's input rounding against the simulator's with its bound."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.batch.outcome import Outcome
from mrvl_convert.cli.device import device_lines
from mrvl_convert.estimate.device import device_row
from mrvl_convert.layers.qnn.kernels import quantize
from mrvl_convert.quantize import Quantization
from support.models import small_cnn


def _int8(tmp_path: Path, name: str, model=None, **options):
    calibration = {"x": np.random.default_rng(0).standard_normal((4, 3, 16, 16))
                   .astype(np.float32)}
    keep = options.pop("keep_fp16", ())
    return mrvl_convert.convert(model or small_cnn(), tmp_path / name,
                                quantize=Quantization(calibration, keep_fp16=keep), **options)


def test_a_whole_int8_artifact_meets_the_rules(tmp_path) -> None:
    result = _int8(tmp_path, "whole")
    flow = result.report["device"]["int8_flow"]
    assert flow["meets"] is True and flow["reasons"] == []
    assert flow["mrvl_subgraphs"] == 1 and flow["cpu_stages"] == 0 and flow["fp16_layers"] == []
    assert set(flow["rules"]) == {"one_region", "no_cpu_op", "one_precision", "host_rounding"}
    # The one float input is quantized by the host on the device, at the quant layer's scale.
    [entry] = flow["input_quantization"]
    assert entry["tensor"] == "x" and entry["max_difference"] == entry["scale"] > 0
    written = json.loads((tmp_path / "whole" / "report.json").read_text())
    assert written["device"]["int8_flow"] == flow


def test_kept_fp16_layers_break_one_precision(tmp_path) -> None:
    conv = next(n.name for n in small_cnn().graph.node if n.op_type == "Conv")
    flow = _int8(tmp_path, "kept", keep_fp16=(conv,)).report["device"]["int8_flow"]
    assert flow["meets"] is False
    assert any(r.startswith("one_precision: ") for r in flow["reasons"])
    assert "Conv2D" in flow["fp16_layers"]


def test_a_cpu_op_in_the_middle_breaks_one_region_and_no_cpu_op(tmp_path) -> None:
    result = _int8(tmp_path, "cut", model=small_cnn(sigmoid=True), min_compute_layers=0)
    flow = result.report["device"]["int8_flow"]
    assert flow["meets"] is False and flow["cpu_stages"] >= 1
    assert {r.split(":")[0] for r in flow["reasons"]} >= {"one_region", "no_cpu_op"}
    # The CLI line and the batch row carry the verdict.
    outcome = Outcome("m.onnx", "m", "ok", str(tmp_path / "cut"),
                      device=device_row(result.report["device"]))
    [line] = device_lines([outcome])
    assert line.startswith("m: int8: does not meet Marvell's pre-quantized rules: one_region")
    assert "half away from zero" in line


def test_a_float_artifact_has_no_int8_verdict(tmp_path) -> None:
    result = mrvl_convert.convert(small_cnn(), tmp_path / "f")
    assert "int8_flow" not in result.report["device"]


def _host_quantize(x: np.ndarray, scale: float) -> np.ndarray:
    """DPDK mldev_utils_neon.c: x / scale rounded half away from zero, clamped to +-127."""
    q = np.divide(x, np.float32(scale), dtype=np.float32)
    return np.clip(np.sign(q) * np.floor(np.abs(q) + 0.5), -127, 127)


@pytest.mark.parametrize("scale", [0.5, 0.03125, 0.0307041])
def test_the_stated_rounding_bound_holds(scale) -> None:
    """The host's and the simulator's quantization differ by one step at most, and only at an
    exact half step or below -127.5 steps, as int8_flow's rule says."""
    steps = np.arange(-140.0, 140.0, 0.25, dtype=np.float32)
    x = (steps * np.float32(scale)).astype(np.float32)
    q = np.divide(x, np.float32(scale), dtype=np.float32)
    diff = np.abs(_host_quantize(x, scale) - quantize(x, scale))
    assert diff.max() == 1
    differs = diff > 0
    assert np.all((q[differs] % 1 == 0.5) | (q[differs] < -127.5))
    assert np.any(q[differs] % 1 == 0.5)  # the ties do differ: the difference is real
