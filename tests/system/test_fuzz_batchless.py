"""Property tests over batchless music nets (tests/support/strategies/batchless.py): the
batchless lift keeps onnxruntime's outputs bit for bit, and the model (frames 9-40 > the
device's batch of 8) converts with its MACs on the accelerator in one Mrvl subgraph and passes
verify. Quick profile by default (a tenth of its examples)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import mrvl_convert
from support.models import canonicalized, run_ort
from support.strategies.batchless import batchless_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


@_FEW
@given(case=batchless_models())
def test_the_lift_keeps_onnxruntime_outputs_bit_for_bit(case):
    _, proto = canonicalized(case.model)
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape and np.array_equal(got[name], value), name


@_FEW
@given(case=batchless_models())
def test_a_batchless_net_is_one_mrvl_subgraph_and_verifies(case, tmp_path_factory):
    out = tmp_path_factory.mktemp("batchless") / "art"
    result = mrvl_convert.convert(case.model, out)
    summary = result.report["summary"]
    cpu = [(e["name"], e.get("reason")) for e in result.report["nodes"]
           if e["placement"] != "mrvl"]
    assert summary["mrvl_subgraphs"] == 1 and summary["mrvl_mac_share"] >= 0.9, (summary, cpu)
    assert mrvl_convert.compare(case.model, out, samples=1).passed
