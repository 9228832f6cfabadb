"""The fp16 floor's Max/Min, generated (``verify/floor_minmax.py``): for any chain of two-input
Max/Min nodes (operands in either order, one broadcasting, named or not) and operands up to
1e3 apart, the floor computes exactly what the device's lowering computes on fp16 operands
(``layers/_minmax.py``: ``o + Relu(f - o)``, ``f - Relu(f - o)``, the gap rounded)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from mrvl_convert.verify.fp16_floor import floor_model
from support.models import run_ort
from support.strategies.deepcutv import lowered, minmax_chain, minmax_chains

pytestmark = pytest.mark.system


@given(minmax_chains())
def test_the_floor_of_a_max_min_chain_is_the_lowerings(case):
    steps, feed = case
    got = run_ort(floor_model(minmax_chain(steps)), feed, optimize=False)["y"]
    assert np.array_equal(got, lowered(steps, feed))
