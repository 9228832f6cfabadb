"""Property tests over long reversals and long linear Resizes
(tests/support/strategies/matbound.py): no constant of the canonical graph exceeds
``pad_forms.MAX_SELECTION``; a reversal computes on onnxruntime, bit for bit, what the Slice
computes (frontend/slice_forms.py), a Resize within resize_matrices.py's bound, 8 2**-24 max|x|
over the two samples each output reads (frontend/resize_strips.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings

from mrvl_convert.frontend.pad_forms import MAX_SELECTION
from mrvl_convert.frontend.resize_matrices import interpolation_weights
from support.models import canonicalized, run_ort
from support.strategies.matbound import LongResize, LongReversal, long_resizes, long_reversals
from support.strategies.padbound import canonical_bit_equal

pytestmark = pytest.mark.system


def _feed(shape):
    rng = np.random.default_rng(0)
    return {"x": (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3, shape))
            .astype(np.float32)}


def _largest(model: onnx.ModelProto) -> int:
    return max((int(np.prod(t.dims)) for t in model.graph.initializer), default=0)


@settings(deadline=None, max_examples=10)
@given(long_reversals())
def test_a_long_reversal_is_bit_equal_and_bounded(case: LongReversal):
    canonical = canonical_bit_equal(case.model(), _feed(case.shape))
    assert "became" in canonical.rewritten.get("slice", ""), canonical.kept
    assert _largest(canonicalized(case.model())[1]) <= MAX_SELECTION


@settings(deadline=None, max_examples=10)
@given(long_resizes())
def test_a_long_resize_is_within_its_bound_and_bounded(case: LongResize):
    model, feed = case.model(), _feed(case.shape)
    canonical, proto = canonicalized(model)
    assert "became" in canonical.rewritten.get("resize", ""), canonical.kept
    assert _largest(proto) <= MAX_SELECTION
    want, got = (next(iter(run_ort(m, feed, optimize=False).values())) for m in (model, proto))
    scale = float(np.float32(case.out) / np.float32(case.shape[3]))
    low, high = interpolation_weights(case.shape[3], case.out, case.coord, scale)[:2]
    x = feed["x"]
    bound = 8 * 2.0 ** -24 * np.maximum(np.abs(x[..., low]), np.abs(x[..., high]))
    assert got.shape == want.shape and (np.abs(got - want) <= bound).all(), \
        float(np.abs(got - want).max())
