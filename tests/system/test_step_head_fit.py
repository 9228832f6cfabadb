"""A per-step head after a recurrent cell over T = 30 steps (above the device's batch of 8)
fits one device: ``frontend/step_heads.py`` remakes the unrolled cell's time-major output as a
view of its batch-1 steps, and ``sequence_lift.py`` computes the head on ``[1, T, ...]``, so
the head is one layer at batch 1 over T rows. On main the head ran at batch T inside the Mrvl
subgraph, which wrote ``logits`` at batch 30: "fits one device: no"."""
from __future__ import annotations

import json

import pytest

import mrvl_convert
from support.step_heads import step_head_model

pytestmark = pytest.mark.system


@pytest.mark.parametrize("cell,head,direction", [
    ("LSTM", "crnn", "bidirectional"),  # a CRNN's Transpose/Reshape before the head
    ("GRU", "squeeze", "forward"),
    ("LSTM", "gemm", "bidirectional"),  # ddddocr: a Gemm over [T, C]
    ("RNN", "crnn", "reverse")])
def test_a_per_step_head_fits_one_device_at_batch_one(tmp_path, cell, head, direction):
    model = step_head_model(cell, head, direction=direction)
    result = mrvl_convert.convert(model, tmp_path / "art")
    device = result.report["device"]
    assert device["fits"] is True, device["reasons"]
    mrvl = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    assert len(mrvl) == 1 and result.summary["mrvl_mac_share"] == 1.0
    assert result.placement("head")["placement"] == "mrvl"
    assert all(t["shape"][0] == 1 for t in mrvl[0]["inputs"] + mrvl[0]["outputs"])
    doc = json.loads((result.out_dir / mrvl[0]["nodes_json"]).read_text())
    assert doc["batch_size"] == "1"
    comparison = mrvl_convert.compare(model, result.out_dir, samples=3)
    assert comparison.passed, comparison.summary_line()
