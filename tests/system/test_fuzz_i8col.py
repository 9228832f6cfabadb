"""Property tests over QDQ per-step heads on ``[T, 1, C]`` (tests/support/strategies/i8col.py):
``step_heads.py`` (with ``int8_step_rows.py``) then ``sequence_lift.py`` make the head's int8
MatMul read ``[1, T, C]`` and onnxruntime's outputs stay bit-equal."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from support.recurrent import run
from support.step_heads import lifted_heads
from support.strategies.i8col import int8_unit_axis_heads

pytestmark = pytest.mark.system


@settings(max_examples=max(5, settings.default.max_examples // 4), deadline=None)
@given(case=int8_unit_axis_heads())
def test_an_int8_unit_axis_head_reads_rows_at_batch_one_bit_equal(case):
    after, graph, _ = lifted_heads(case.model)
    head = next(n for n in graph.nodes if n.name == "head")
    assert list(head.inputs[0].shape) == [1, case.steps, case.width]
    want, got = run(case.model, case.feeds), run(after, case.feeds)
    for name, value in want.items():
        assert got[name].shape == value.shape and np.array_equal(got[name], value), name
