"""Issue 39: mrvl-convert warns, one line on stderr, when a ``--quantize int8`` conversion runs
less than half of its MACs in int8 on the accelerator, naming the reason that cut most; and says
nothing of it for a conversion that stays int8."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from mrvl_convert.cli.convert import main
from mrvl_convert.cli.notices import int8_share_lines
from support.models import small_cnn


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("m")
    onnx.save(small_cnn(), folder / "cnn.onnx")
    np.savez(folder / "cal.npz",
             x=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    return folder


def _warnings(files, tmp_path, capsys, *extra):
    code = main([str(files / "cnn.onnx"), "-o", str(tmp_path / "out"), "-j", "1", "-q",
                 "--quantize", "int8", "--calibration", str(files / "cal.npz"), *extra])
    assert code == 0
    return [line for line in capsys.readouterr().err.splitlines() if "int8 on the" in line]


def test_the_big_conv_kept_in_fp16_is_warned_about(files, tmp_path, capsys) -> None:
    lines = _warnings(files, tmp_path, capsys, "--keep-fp16", "Conv_3")
    assert len(lines) == 1
    line = lines[0]
    assert "only 26.2% of the MACs run int8 on the accelerator" in line
    assert "fp16 on it 73.8%" in line
    assert "most cut by: kept in fp16 (--keep-fp16) (73.8% of the MACs: Conv_3)" in line


def test_a_normal_int8_conversion_is_not(files, tmp_path, capsys) -> None:
    assert _warnings(files, tmp_path, capsys) == []


def test_no_warning_at_half_and_none_without_macs() -> None:
    at_half = {"shares": {"int8": 0.5, "fp16": 0.5, "cpu": 0.0}, "not_int8": []}
    no_macs = {"shares": {"int8": 0.0, "fp16": 0.0, "cpu": 0.0}, "not_int8": []}
    assert int8_share_lines("m.onnx", at_half) == []
    assert int8_share_lines("m.onnx", no_macs) == []


def test_the_cpu_reason_is_named(files, tmp_path, capsys) -> None:
    lines = _warnings(files, tmp_path, capsys, "--deny", "Conv")
    assert len(lines) == 1
    assert "CPU 98.4%" in lines[0] and "most cut by: on CPU: " in lines[0]
