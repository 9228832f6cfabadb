"""The fp16 floor's mask clamp, generated (``verify/floor_masks.py``): for any fill below
fp16's range (a Constant node or an initializer), mask and scores within the clamp's bound, the
floor is finite and bit-equal to the floor of the model the artifact computes (the fill clamped
to -32752), and the clamp alone leaves the float32 model's output bit-equal."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from mrvl_convert.frontend.mask_constants import MASK_FLOOR
from mrvl_convert.verify.floor_masks import clamp_floor_masks
from mrvl_convert.verify.fp16_floor import floor_model
from support.models import run_ort
from support.strategies.t5floor import masked_attention, masked_attentions

pytestmark = pytest.mark.system


@given(masked_attentions())
def test_the_floor_of_a_mask_below_fp16_is_the_artifacts(case):
    fill, length, as_constant, feed = case
    model = masked_attention(fill, length=length, as_constant=as_constant)
    floor = run_ort(floor_model(model), feed, optimize=False)["out"]
    assert np.isfinite(floor).all()
    artifact = masked_attention(MASK_FLOOR, length=length, as_constant=as_constant)
    assert np.array_equal(floor, run_ort(floor_model(artifact), feed, optimize=False)["out"])
    clamped = masked_attention(fill, length=length, as_constant=as_constant)
    assert clamp_floor_masks(clamped, ["out"]) == 1
    assert np.array_equal(run_ort(clamped, feed, optimize=False)["out"],
                          run_ort(model, feed, optimize=False)["out"])
