"""Property tests over a Pad of any mode between convolutions (tests/support/strategies/pads.py):
the canonical graph computes on onnxruntime, bit for bit, what the model does (the pass is exact
for finite inputs), every drawn Pad is rewritten, left for its Conv, folded into its MaxPool or
kept for a value beyond float16 (-inf), and one between two layers
(Conv, Conv1d or Gemm) converts to one Mrvl subgraph whose hybrid run is within the fp16
tolerance."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, settings

from mrvl_convert import HybridSession, convert
from support.backend_cases import assert_fp16_close
from support.models import canonicalized, run_ort
from support.strategies.pads import pad_cases

pytestmark = pytest.mark.system


@settings(deadline=None)
@given(pad_cases())
def test_rewrite_is_bit_equal(case):
    model = case.model()
    canonical, proto = canonicalized(model)
    ops, kept = [n.op_type for n in proto.graph.node], canonical.kept.get("pad", "")
    assert "Pad" not in ops or ops[ops.index("Pad") + 1:ops.index("Pad") + 2] == ["Conv"] \
        or "float16 range" in kept, (ops, kept)
    event("left for its Conv" if "Pad" in ops and not kept else
          "folded into the MaxPool" if "pad" in canonical.merged else
          kept or canonical.rewritten["pad"].split(":")[0])
    feed = case.feed()
    want, got = run_ort(model, feed, optimize=False), run_ort(proto, feed, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape
        assert np.array_equal(got[name].view(np.uint32), value.view(np.uint32)), (case, name)


@settings(deadline=None, max_examples=8)
@given(pad_cases(between_layers=True))
def test_between_layers_is_one_mrvl_subgraph(case):
    model = case.model()
    with tempfile.TemporaryDirectory() as tmp:
        result = convert(model, Path(tmp) / "a")
        got = HybridSession(Path(tmp) / "a").run(None, case.feed())
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0), case
    want = run_ort(model, case.feed(), optimize=False)
    for k, output in enumerate(model.graph.output):
        assert_fp16_close(got[k], want[output.name], f"{case} {output.name}")
