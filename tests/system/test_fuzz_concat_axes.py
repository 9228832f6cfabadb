"""Property tests over random Concats on H or W of 4-D tensors
(tests/support/strategies/concat_axes.py): canonicalize, with frontend/concat_views.py in it,
makes each the channel Concat of 4-D views and computes on onnxruntime what the model does, bit
for bit (data movement, and in a QDQ model Q/DQ pairs on the grid the value is on); in a QDQ
model every view and the Concat read a DequantizeLinear and are read by a QuantizeLinear alone
(int8 layers); and the model converts to one Mrvl stage and passes verify."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings

import mrvl_convert
from support.models import canonicalized, run_ort
from support.strategies.concat_axes import concat_axes_from_spec, concat_axes_models

pytestmark = pytest.mark.system


@settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None)
@given(case=concat_axes_models())
def test_an_h_or_w_concat_is_a_bit_equal_channel_concat(case):
    canonical, proto = canonicalized(case.model)
    [want] = run_ort(case.model, case.feeds, optimize=False).values()
    [got] = run_ort(proto, case.feeds, optimize=False).values()
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    [join] = [n for n in canonical.graph.nodes if n.op == "Concat"]
    assert join.attrs["axis"] == 1 and len(join.outputs[0].shape) == 4, join
    if case.spec["int8"]:
        moved = [n for n in canonical.graph.nodes if n.op in ("Reshape", "Transpose")] + [join]
        for node in moved:
            assert {t.inputs[0].op for t in node.inputs if t.inputs} == {"DequantizeLinear"}
            assert [r.op for r in node.outputs[0].outputs] == ["QuantizeLinear"], node.name


@settings(max_examples=max(3, settings.default.max_examples // 10), deadline=None)
@given(case=concat_axes_models())
@example(case=concat_axes_from_spec({"shape": [1, 2, 3, 1], "axis": 3, "negative": True,
                                     "sizes": [1, 1], "int8": True, "seed": 0,
                                     "scales": [0.004, 0.01, 0.004, 0.03]}))
@example(case=concat_axes_from_spec({"shape": [2, 2, 1, 3], "axis": 2, "negative": False,
                                     "sizes": [2, 1, 3], "int8": False, "seed": 1,
                                     "scales": [0.004, 0.01, 0.004, 0.03]}))
def test_random_h_or_w_concats_convert_and_pass(case):
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(case.model, Path(tmp) / "art", min_compute_layers=0)
        assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
        [join] = [n for n in result.report["nodes"] if n["name"] == "join"]
        assert join["rule"] == ("mrvl.qnn_concat" if case.spec["int8"] else "mrvl.concat")
        comparison = mrvl_convert.compare(case.model, Path(tmp) / "art", samples=1)
        assert comparison.passed, comparison.summary_line()
