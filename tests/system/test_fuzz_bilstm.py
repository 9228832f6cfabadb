"""Property tests over outer sums (tests/support/strategies/bilstm.py): the canonical graph
(frontend/outer_sums.py widens the one-channel operand by a 1x1 Conv of ones) computes what the
model does on onnxruntime, bit for bit, and the conversion is one Mrvl subgraph whose artifact
passes verify. Quick profile by default (each example is a conversion and a verify)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import mrvl_convert
from support.models import canonicalized, run_ort
from support.strategies.bilstm import outer_sum_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(4, settings.default.max_examples // 10))


@_FEW
@given(case=outer_sum_models())
def test_an_outer_sum_is_widened_bit_equal(case):
    canonical, proto = canonicalized(case.model)
    add = next(n for n in canonical.graph.nodes if n.name == "outer_sum")
    assert add.inputs[0].inputs[0].op == "Conv"
    want, got = run_ort(case.model, case.feeds), run_ort(proto, case.feeds)
    for name, value in want.items():
        assert np.array_equal(got[name], value), name


@_FEW
@given(case=outer_sum_models())
def test_an_outer_sum_converts_whole_and_passes_verify(case):
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(case.model, Path(tmp) / "o", min_compute_layers=0)
        assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
        assert mrvl_convert.compare(case.model, result.out_dir, [case.feeds]).passed
