"""Property tests over per-step heads after a recurrent cell over T > 8 steps
(tests/support/strategies/step_heads.py): each converts to one Mrvl subgraph that fits one
device, every Mrvl boundary tensor at batch 1 (the head computes on ``[1, T, ...]``), and the
artifact verifies against onnxruntime. Quick profile by default."""
from __future__ import annotations

import pytest
from hypothesis import given, settings

import mrvl_convert
from support.strategies.step_heads import step_head_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


@_FEW
@given(case=step_head_models())
def test_a_per_step_head_fits_at_batch_one(case, tmp_path_factory):
    result = mrvl_convert.convert(case.model, tmp_path_factory.mktemp("steps") / "art")
    device = result.report["device"]
    assert device["fits"] is True, device["reasons"]
    mrvl = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    assert len(mrvl) == 1 and result.summary["mrvl_mac_share"] == 1.0
    assert all(t["shape"][0] == 1 for t in mrvl[0]["inputs"] + mrvl[0]["outputs"])
    comparison = mrvl_convert.compare(case.model, result.out_dir, [case.feeds])
    assert comparison.passed, comparison.summary_line()
