"""Property tests over random Concat-then-pick models (tests/support/strategies/pick_forms.py):
canonicalize, with frontend/pick_forms.py and frontend/concat_views.py in it, computes on
onnxruntime bit for bit what the model does (both are data movement: exact); a Gather of one
run of positions is gone, a Concat on a non-leading axis of a batch-1 model is a 4-D channel
Concat, and the model converts."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import mrvl_convert
from support.models import canonicalized, run_ort
from support.strategies.pick_forms import pick_models

pytestmark = pytest.mark.system


def _gathers_one_run(spec) -> bool:
    if spec["pick"] != "gather":
        return False
    rank = len(spec["shape"])
    size = sum(spec["sizes"]) if spec["on"] == spec["axis"] % rank else spec["shape"][spec["on"]]
    picks = [i % size for i in np.atleast_1d(spec["indices"])]
    return picks == list(range(picks[0], picks[0] + len(picks)))


@settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None)
@given(case=pick_models())
def test_canonical_picks_and_joins_are_bit_equal(case):
    canonical, proto = canonicalized(case.model)
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        assert np.array_equal(got[name].view(np.uint32), value.view(np.uint32)), name
    ops = [n.op for n in canonical.graph.nodes]
    if _gathers_one_run(case.spec):
        assert "Gather" not in ops, ops
    rank = len(case.spec["shape"])
    if case.spec["axis"] % rank and case.spec["shape"][0] == 1 \
            and any(n.op == "Concat" and n.name == "join" for n in canonical.graph.nodes):
        (join,) = [n for n in canonical.graph.nodes if n.name == "join"]
        assert join.attrs["axis"] == 1 and len(join.outputs[0].shape) == 4, join


@settings(max_examples=max(3, settings.default.max_examples // 10), deadline=None)
@given(case=pick_models())
def test_random_picks_convert_and_pass(case):
    with tempfile.TemporaryDirectory() as tmp:
        mrvl_convert.convert(case.model, Path(tmp) / "art", min_compute_layers=0)
        comparison = mrvl_convert.compare(case.model, Path(tmp) / "art", samples=1)
        assert comparison.passed, comparison.summary_line()
