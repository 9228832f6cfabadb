"""Property tests of the scout's small forms (tests/support/strategies/smallforms.py): a unit-axis
Softmax as a last-axis one of a view and a Scaler as Add + Mul keep onnxruntime's outputs bit
for bit. Quick profile by default (a tenth of its examples)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings

from support.models import canonicalized, run_ort
from support.strategies.smallforms import scalers, unit_axis_softmaxes

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(3, settings.default.max_examples // 10), deadline=None)


def _bit_equal(case, op):
    canonical, proto = canonicalized(case.model)
    assert op in canonical.rewritten, canonical.kept
    want = run_ort(case.model, case.feeds)["y"]
    got = run_ort(proto, case.feeds)["y"]
    assert got.shape == want.shape and got.tobytes() == want.tobytes()


@_FEW
@given(case=unit_axis_softmaxes())
def test_unit_axis_softmax_rewrite_is_bit_equal(case):
    _bit_equal(case, "softmax")


@_FEW
@given(case=scalers())
def test_scaler_rewrite_is_bit_equal(case):
    _bit_equal(case, "scaler")
