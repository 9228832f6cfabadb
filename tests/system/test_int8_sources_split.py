"""benchmarks/int8_trained.py's distinct-source calibration (issue 44): the rows the keep-fp16
search chooses on come from one source, the rows it judges on from another, each row keeping
its index (so its turn, ``i % classes``, and its label stay right). No download."""
from __future__ import annotations

import numpy as np
import pytest

from mrvl_convert.core.samples import remedy_split
from support.benchmarks import bench_module

pytestmark = pytest.mark.system


def test_search_halves_come_from_their_own_sources():
    trained = bench_module("int8_trained_data")
    count = 20
    choice = np.zeros((count, 3, 2, 2), np.float32) + np.arange(count)[:, None, None, None]
    held = -choice - 1  # negative: a row from the held-out source, value -(i + 1)
    calib = trained._by_role(count, choice, held)
    split = remedy_split(count)
    assert split.judge and split.choose
    for i in split.choose:
        assert np.all(calib[i] == i)
    for i in split.judge:
        assert np.all(calib[i] == -(i + 1))
    assert np.all(choice >= 0)  # the choice source is not written into


def test_turned_lines_turn_odd_rows_by_180():
    pytest.importorskip("PIL", reason="the benchmark resizes with Pillow: pip install .[bench]")
    trained = bench_module("int8_trained_data")
    line = np.tile(np.linspace(0, 255, 192, dtype=np.float32), (48, 1)).astype(np.uint8)
    out = trained._turned_lines([line, line])
    assert out.shape == (2, 3, 48, 192)
    assert out[0, 0, 0, 0] < out[0, 0, 0, -1]   # dark to light, as drawn
    assert out[1, 0, 0, 0] > out[1, 0, 0, -1]   # turned: light to dark
