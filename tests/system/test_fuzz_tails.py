"""Generated tails (tests/support/strategies/tails.py): Elu, Max/Min of two activations and an
embedding's L2 normalisation, with drawn parameters and input scales, are on the accelerator and
its hybrid run stays within the bound each lowering's module states."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from support.models import run_ort
from support.onnxref import fp16_round
from support.strategies.tails import TAILS

pytestmark = pytest.mark.system


@settings(max_examples=max(5, settings.default.max_examples // 4), deadline=None)
@given(tail=TAILS, scale=st.sampled_from([1e-2, 1.0, 50.0]), seed=st.integers(0, 2 ** 16))
def test_a_lowered_tail_is_on_mrvl_within_its_bound(tail, scale, seed):
    model, shape, bound = tail
    x = fp16_round(np.random.default_rng(seed).standard_normal(shape) * scale)
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(model, Path(tmp) / "o")
        assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
        [got] = HybridSession(result.out_dir, threads=1).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    limit = bound(x, want)
    assert np.all(np.abs(got - want) <= limit), float(np.max(np.abs(got - want) - limit))
