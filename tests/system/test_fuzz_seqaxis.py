"""Property tests over batchless audio nets whose frame axis the graph mixes
(tests/support/strategies/seqaxis.py): the canonical graph (window Conv, sequence lift) keeps
onnxruntime's outputs (the per-frame head bit for bit where no window FC sums in another order,
else within the FC's stated bound), and the model converts whole: one Mrvl subgraph, its MACs
on the accelerator, verify passing. Quick profile by default (a tenth of its examples)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from support.models import canonicalized, run_ort
from support.strategies.seqaxis import assert_whole_and_verified, sequence_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


@_FEW
@given(case=sequence_models())
def test_the_rewrites_keep_onnxruntime_outputs(case):
    _, proto = canonicalized(case.model)
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        if case.spec["windows"] or name != "activations_out":
            # Sigmoid / Softmax outputs in (0, 1) after an FC summed in another order.
            assert np.allclose(got[name], value, rtol=0, atol=1e-5), name
        else:
            assert np.array_equal(got[name], value), name


@_FEW
@given(case=sequence_models())
def test_a_sequence_net_is_one_mrvl_subgraph_and_verifies(case, tmp_path_factory):
    assert_whole_and_verified(case.model, tmp_path_factory.mktemp("seqaxis") / "art",
                              samples=1)
