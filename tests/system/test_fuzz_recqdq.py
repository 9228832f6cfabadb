"""Property tests over QDQ per-step heads closed by a ``Reshape [T, C] -> [1, T, C]`` or an
``Unsqueeze(0)`` after their product's Q/DQ pair (tests/support/strategies/recqdq.py): after
``step_heads.py`` and ``sequence_lift.py`` the pair is on ``[1, T, C]`` right after the bias
Add (the int8 FC's pattern whole) and onnxruntime's outputs are bit-equal. Quick profile."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from support.recurrent import run
from support.step_heads import lifted_heads
from support.strategies.recqdq import closed_heads

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(4, settings.default.max_examples // 5), deadline=None)


@_FEW
@given(case=closed_heads())
def test_a_closed_qdq_head_lifts_whole_and_bit_equal(case):
    after, graph, _ = lifted_heads(case.model)
    head = next(n for n in graph.nodes if n.name == "head")
    assert head.op == "MatMul" and list(head.inputs[0].shape)[0] == 1
    [add] = head.outputs[0].outputs
    [quant] = add.outputs[0].outputs
    assert quant.op == "QuantizeLinear"
    assert list(quant.outputs[0].shape) == [1, case.steps, case.classes]
    want, got = run(case.model, case.feeds), run(after, case.feeds)
    assert want.keys() == got.keys()
    for name in want:
        assert want[name].shape == got[name].shape and np.array_equal(want[name], got[name]), name
