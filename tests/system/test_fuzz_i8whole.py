"""Generated pooled heads (vietcombank_captcha's and sscd_distilled's int8 tails): whatever
their widths, a second FC or an L2 normalisation, our recipe's int8 model converts whole (one
Mrvl subgraph, no CPU stage) and verify against its QDQ model passes."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note, settings

import mrvl_convert
from support.int8 import converted_int8
from support.strategies.i8whole import pooled_heads

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 8), deadline=None)
@given(model=pooled_heads())
def test_a_pooled_head_stays_whole_and_verifies(model):
    with tempfile.TemporaryDirectory(prefix="i8whole_") as tmp:
        result, qdq = converted_int8(model, Path(tmp) / "out")
        summary = result.report["summary"]
        cpu = [(e["name"], e.get("reason")) for e in result.report["nodes"]
               if e["placement"] == "cpu"]
        note(str((summary, cpu)))
        assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"], cpu) == (1, 0, [])
        rng = np.random.default_rng(0)
        feeds = [{"x": rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(3)]
        comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
        note(str([(r.tensor, r.max_abs, r.max_rel) for r in comparison.judged_rows]))
        assert comparison.passed, comparison
