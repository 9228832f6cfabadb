"""Property tests over random reductions of a stack (tests/support/strategies/stackreduce.py):
canonicalize, with frontend/stack_reductions.py in it, leaves no reduction and computes on
onnxruntime what the model does: bit for bit for Max and Min, within the module's bound for Sum
(2 (n - 1) u S) and Mean (2 (n + 1) u S / n), S the sum of the operands' magnitudes; and the
model converts whole (one Mrvl stage) and passes verify."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import mrvl_convert
from support.models import canonicalized, run_ort
from support.strategies.stackreduce import (REDUCTIONS, bound, stack_reduce_models,
                                            stacked_operands)

pytestmark = pytest.mark.system


@settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None)
@given(case=stack_reduce_models())
def test_a_reduction_of_a_stack_is_its_elementwise_chain(case):
    canonical, proto = canonicalized(case.model)
    assert not {n.op for n in canonical.graph.nodes} & set(REDUCTIONS)
    [want] = run_ort(case.model, case.feeds, optimize=False).values()
    [got] = run_ort(proto, case.feeds, optimize=False).values()
    assert got.shape == want.shape
    spec = case.spec
    allowed = bound(spec["op"], stacked_operands(case.model, case.feeds), spec["axis"],
                    spec["keepdims"])
    if spec["op"] in ("ReduceMax", "ReduceMin"):
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    else:
        assert np.all(np.abs(got.astype(np.float64) - want) <= allowed)


@settings(max_examples=max(3, settings.default.max_examples // 10), deadline=None)
@given(case=stack_reduce_models())
def test_random_stack_reductions_convert_and_pass(case):
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(case.model, Path(tmp) / "art", min_compute_layers=0)
        assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
        comparison = mrvl_convert.compare(case.model, Path(tmp) / "art", samples=1)
        assert comparison.passed, comparison.summary_line()
