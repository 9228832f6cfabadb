"""Fuzz (issue 43 finding 9): an If folded by a pinned input computes what the branch it takes
computes, whatever branch tensors are handed out (read inside the branch too, or twice)."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import pytest
from hypothesis import given, settings

from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import run_ort
from support.strategies.rules43 import BranchModel, branch_models, unrolled

pytestmark = pytest.mark.system


# Each example canonicalizes a model and runs two sessions: a third of the profile's examples.
@settings(max_examples=max(5, settings.default.max_examples // 3))
@given(branch_models())
def test_a_folded_if_computes_its_branch(case: BranchModel) -> None:
    canonical = canonicalize(load_model(case.model, values={"mode": case.mode}))
    assert "If" not in {n.op for n in canonical.graph.nodes}
    folded = gs.export_onnx(canonical.graph, do_type_check=False)
    folded.ir_version = 8
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = run_ort(folded, {"x": x, "mode": np.array(case.mode, np.int64)})
    want = run_ort(unrolled(case), {"x": x})
    for name in case.outputs:
        assert np.array_equal(got[name], want[name]), name
