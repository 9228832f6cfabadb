"""Property tests over batchless ``[frames, bins]`` models (tests/support/strategies/fit.py):
each fits one device, its Mrvl subgraph reads the lifted ``[1, frames, ...]`` tensor (the
Nodes-JSON at batch 1), the lift runs on CPU, and the artifact verifies against onnxruntime.
Quick profile by default."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

import mrvl_convert
from support.strategies.fit import frames_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


@_FEW
@given(case=frames_models())
def test_a_batchless_frames_model_fits_at_batch_one(case, tmp_path_factory):
    result = mrvl_convert.convert(case.model, tmp_path_factory.mktemp("fit") / "art")
    device = result.report["device"]
    assert device["fits"] is True, device["reasons"]
    mrvl = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    assert len(mrvl) == 1 and all(t["shape"][0] == 1 for t in mrvl[0]["inputs"])
    doc = json.loads((result.out_dir / mrvl[0]["nodes_json"]).read_text())
    assert doc["batch_size"] == "1"
    assert result.manifest["model"]["inputs"][0]["shape"] == [case.spec["frames"],
                                                              case.spec["bins"]]
    assert mrvl_convert.compare(case.model, result.out_dir, [case.feeds]).passed
