"""Verify's verdict forms, generated: a top-1 flip is counted exactly when fp32's margin is
beyond the bound, and the fp16 floor's model of any run-time-sized graph runs on onnxruntime
and equals rounding each node's result to fp16 (shapes and indices untouched)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given

from mrvl_convert.verify.fp16_floor import floor_model
from mrvl_convert.verify.metrics import Top1
from support.strategies.verdict import logits_pairs, sized_models

pytestmark = pytest.mark.system


@given(logits_pairs())
def test_a_flip_counts_exactly_beyond_the_margin(case):
    want, got, bound = case
    ties = Top1()
    ties.add(got, want, bound, decisive=True)
    flips = got.argmax(axis=1) != want.argmax(axis=1)
    top2 = np.sort(want.astype(np.float64), axis=1)[:, -2:]
    beyond = (top2[:, 1] - top2[:, 0]) > bound
    assert ties.counted == int((flips & beyond).sum())
    assert ties.near_ties == int((flips & ~beyond).sum())
    assert ties.passes(1.0) == (ties.counted == 0)
    randomly = Top1()
    randomly.add(got, want, bound, decisive=False)
    assert randomly.passes(1.0)


@given(sized_models())
def test_the_floor_model_of_a_sized_graph_runs_and_rounds_data_only(case):
    model, shape = case
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    rounded = floor_model(model)
    got = _run(rounded, x)
    want = _run(model, x)
    assert got.shape == want.shape  # the Reshape, Gather and Expand sizes kept
    value, exact = float(got.reshape(-1)[0]), float(want.reshape(-1)[0])
    assert np.all(got == value) and value == float(np.float16(value))  # a rounded result
    # x, Relu, the factor and the product each rounded once: within a few fp16 steps
    assert abs(value - exact) <= 4 * abs(exact) * 2 ** -11


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]
