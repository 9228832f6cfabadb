"""The int8 twin of ``test_step_head_fit.py``: Conv -> LSTM over T = 30 steps -> a per-step Gemm
head, quantized by our recipe. ``frontend/step_heads.py`` makes the head's int8 Gemm a MatMul by
its int8 weight ``[C, O]`` and an Add of its int32 bias, ``sequence_lift.py`` lifts it through
its QuantizeLinear / DequantizeLinear to ``[1, T, C]``, and ``mrvl.qnn_fc_tokens`` takes it as
one int8 FC at batch 1 (its bias role). Before, the head's QDQ pair stopped the lift: the int8
FC ran at batch 30 and the model did not fit one device."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from support.int8 import converted_int8
from support.step_heads import step_head_model

pytestmark = pytest.mark.system


def _int8_share(result) -> float:
    return result.report["precision"]["shares"]["int8"]


def test_an_int8_per_step_gemm_head_is_an_int8_fc_at_batch_one(tmp_path):
    model = step_head_model("LSTM", "gemm", direction="bidirectional")
    result, qdq = converted_int8(model, tmp_path / "art")
    device = result.report["device"]
    assert device["fits"] is True, device["reasons"]
    head = result.placement("head")
    assert (head["placement"], head["rule"]) == ("mrvl", "mrvl.qnn_fc_tokens")
    mrvl = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    assert len(mrvl) == 1 and result.summary["mrvl_mac_share"] == 1.0
    assert all(t["shape"][0] == 1 for t in mrvl[0]["inputs"] + mrvl[0]["outputs"])
    # the head's MACs (30 x 16 x 5) are int8 ones, as the Conv's; the LSTM stays fp16
    head_macs = 30 * 16 * 5
    assert _int8_share(result) * result.summary["macs"] >= head_macs
    feeds = [{"image": x} for x in np.random.default_rng(3).uniform(-1, 1, [2, 1, 3, 4, 30])
             .astype(np.float32)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds, with_floor=False)
    assert comparison.passed, comparison.summary_line()
    assert all(row.max_abs == 0 for row in comparison.judged_rows), comparison.summary_line()


def test_an_int8_head_over_unit_axis_steps_is_an_int8_fc_at_batch_one(tmp_path):
    """A CRNN's head reads ``[T, 1, C]``: lifted as it is it would be 4-D, which no int8 FC
    takes. ``frontend/int8_step_rows.py`` runs its Q/DQ pair and MatMul on ``[T, C]``, so it is
    one int8 FC at batch 1 and the model fits one device (on integ9: batch 30, fits no)."""
    model = step_head_model("LSTM", "crnn", direction="bidirectional")
    result, qdq = converted_int8(model, tmp_path / "art")
    device = result.report["device"]
    assert device["fits"] is True, device["reasons"]
    assert [n["name"] for n in result.report["nodes"] if n["placement"] == "cpu"] == []
    head = result.placement("head")
    assert (head["placement"], head["rule"]) == ("mrvl", "mrvl.qnn_fc_tokens")
    mrvl = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    assert len(mrvl) == 1 and result.summary["mrvl_mac_share"] == 1.0
    assert all(t["shape"][0] == 1 for t in mrvl[0]["inputs"] + mrvl[0]["outputs"])
    assert _int8_share(result) * result.summary["macs"] >= 30 * 16 * 5
    feeds = [{"image": x} for x in np.random.default_rng(4).uniform(-1, 1, [2, 1, 3, 4, 30])
             .astype(np.float32)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds, with_floor=False)
    assert comparison.passed, comparison.summary_line()
    assert all(row.max_abs == 0 for row in comparison.judged_rows), comparison.summary_line()
