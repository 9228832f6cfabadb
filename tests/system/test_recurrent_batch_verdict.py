"""A recurrent cell at batch N > 1 unrolls, but its steps' Mul2D and Concat layers take batch 1
only: those steps run on CPU in pieces. The report says so: the cell's ``canonical`` names the
batch and what to do, and every step on CPU carries its reason (on main the cell read as plainly
unrolled and its CPU steps had no reason: a verdict with nothing in it)."""
from __future__ import annotations

import pytest

import mrvl_convert
from support import recurrent

pytestmark = pytest.mark.system


def test_a_batched_cell_says_why_its_steps_run_on_cpu(tmp_path):
    model = recurrent.cell_model("LSTM", batch=4, steps=5, outputs=(True, False, False))
    result = mrvl_convert.convert(model, tmp_path / "art")
    entry = result.placement("cell")
    assert "at batch 4 its steps' Mul2D and Concat layers, which take batch 1 only" in \
        entry["canonical"]
    assert "convert at batch 1" in entry["canonical"]
    on_cpu = [d for d in entry["derived"] if "layer" not in d]
    assert on_cpu and all(d["reason"] for d in on_cpu)
    assert result.report["device"]["fits"] is False


def test_a_cell_at_batch_one_reads_as_plainly_unrolled(tmp_path):
    result = mrvl_convert.convert(recurrent.cell_model("GRU", steps=5), tmp_path / "art")
    assert "at batch" not in result.placement("cell")["canonical"]
