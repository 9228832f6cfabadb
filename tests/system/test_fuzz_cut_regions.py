"""Property tests over layout round trips (tests/support/strategies/cut_regions.py): a
Transpose, maybe a same-shape Reshape and per-tensor Q/DQ pairs, and a second Transpose. The
canonical graph computes onnxruntime's outputs bit for bit; where the second Transpose undoes
the first, no move of the chain is left (``frontend/round_trips.py``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from support.models import canonicalized, run_ort
from support.strategies.cut_regions import round_trip_models

pytestmark = pytest.mark.system

CHAIN = {"out_of_place", "same_shape", "back"}


@settings(max_examples=max(5, settings.default.max_examples // 4), deadline=None)
@given(case=round_trip_models())
def test_round_trips_go_and_the_outputs_stay_bit_equal(case):
    canonical, proto = canonicalized(case.model)
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape
        assert np.array_equal(got[name], value), name
    if case.is_round_trip:
        left = {n.name for n in canonical.graph.nodes} & CHAIN
        assert not left, (left, str(case))
