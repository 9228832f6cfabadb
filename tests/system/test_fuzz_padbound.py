"""Property test over Pads of a long axis (tests/support/strategies/padbound.py):
the strips form (frontend/pad_strips.py) computes on onnxruntime, bit for bit, what the Pad
computes, and no constant of the canonical graph grows with the long axis."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import pytest
from hypothesis import given, settings

from support.strategies.padbound import LongPad, canonical_bit_equal, long_pads

pytestmark = pytest.mark.system


@settings(deadline=None, max_examples=15)
@given(long_pads())
def test_the_strips_form_is_the_pad_bit_for_bit(case: LongPad):
    rng = np.random.default_rng(0)
    feed = {"x": (rng.standard_normal(case.shape) * 10.0 ** rng.integers(-2, 3, case.shape))
            .astype(np.float32)}
    canonical = canonical_bit_equal(case.model(), feed)
    assert "became" in canonical.rewritten.get("pad", ""), canonical.kept
    largest = max(t.values.size for t in canonical.graph.tensors().values()
                  if isinstance(t, gs.Constant))
    rank = len(case.shape)
    channels = case.shape[1] + max(0, case.pads[1]) + max(0, case.pads[rank + 1])
    spatial = int(np.prod([n + b + e for n, b, e in zip(case.shape[2:], case.pads[2:rank],
                                                           case.pads[rank + 2:])]))
    # [b, b] selections (b <= 5); [C', 1, 1, 1] ones; a constant pad's [1, 1, H', W'] border
    assert largest <= max(25, channels, spatial), largest
