"""``verify/kept_graph.py`` on generated models: ``round_groups`` with its look-ups kept as
indexes across the fp16 layers makes the model that rounding each layer on the graph read
afresh makes (one call per layer, every look-up a scan of the proto): the same nodes and
initializers, bit-equal outputs on onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given

from mrvl_convert.verify.kept_fp16 import round_groups
from support.models import run_ort
from support.strategies.keptfast import SHAPE, grouped_models

pytestmark = pytest.mark.system


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


@given(grouped_models())
def test_rounding_with_indexes_is_rounding_each_layer_afresh(case):
    model, groups, unrounded = case
    once, afresh = _copy(model), _copy(model)
    assert round_groups(once, groups, unrounded) == [n for g in groups for n in g]
    for group, kept in zip(groups, unrounded):
        round_groups(afresh, [group], [kept])
    assert sorted(n.SerializeToString(deterministic=True) for n in once.graph.node) == \
        sorted(n.SerializeToString(deterministic=True) for n in afresh.graph.node)
    assert [t.name for t in once.graph.initializer] == \
        [t.name for t in afresh.graph.initializer]
    x = (np.random.default_rng(0).standard_normal(SHAPE) * 3).astype(np.float32)
    got, want = run_ort(once, {"x": x}), run_ort(afresh, {"x": x})
    for name in got:
        np.testing.assert_array_equal(got[name], want[name])
