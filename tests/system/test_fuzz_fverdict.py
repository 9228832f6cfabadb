"""onnxruntime's dynamic int8 forms, generated: the fp16 floor model never rounds their int32
accumulators or their scales, runs on onnxruntime and costs what fp16 rounding of the data
costs (finite, a few thousandths of the peak), however wide the accumulation."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given

from mrvl_convert.verify.fp16_floor import floor_model
from mrvl_convert.verify.value_tensors import never_rounded
from support.strategies.fverdict import dynamic_int8_models

pytestmark = pytest.mark.system


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@given(dynamic_int8_models())
def test_the_floor_of_a_dynamic_int8_model_is_finite_and_small(case):
    model, shape, accumulator = case
    assert {accumulator, "scales", "x_scale"} <= never_rounded(model)
    x = (4 * np.random.default_rng(1).standard_normal(shape)).astype(np.float32)
    want, got = _run(model, x), _run(floor_model(model), x)
    assert np.isfinite(got).all()
    peak = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= 0.02 * max(peak, 1e-3)
