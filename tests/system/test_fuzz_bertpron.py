"""Property tests over tf2onnx's head moves through rank 5 and 6
(tests/support/strategies/bertpron.py): frontend/rank5_transposes.py and rank5_detours.py keep
onnxruntime's outputs bit for bit, in float and through int8 Q/DQ pairs, and leave no tensor
of rank 5 or more. Quick profile by default."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from mrvl_convert.core.graph import static_shape
from support.models import canonicalized, run_ort
from support.strategies.bertpron import head_moves

pytestmark = pytest.mark.system

_SOME = settings(max_examples=max(5, settings.default.max_examples // 2), deadline=None)


@_SOME
@given(model=head_moves())
def test_a_head_move_is_rank_4_with_the_same_outputs(model):
    canonical, proto = canonicalized(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    want, got = run_ort(model, feeds), run_ort(proto, feeds)
    for name, value in want.items():
        assert got[name].shape == value.shape and np.array_equal(got[name], value), name
    ranks = [len(static_shape(t) or []) for n in canonical.graph.nodes for t in n.outputs]
    assert max(ranks) <= 4
