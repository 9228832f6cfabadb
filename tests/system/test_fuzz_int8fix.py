"""Generated lone BatchNormalizations (issue 45 finding 7): whatever their parameters, the int8
conversion keeps them whole on the accelerator (one Mrvl subgraph, no CPU stage), as the fp16
channel affine, and the artifact is bit-equal to its QDQ model under verify's reference."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note, settings

import mrvl_convert
from support.int8 import converted_int8
from support.strategies.int8fix import lone_batchnorm_models

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(model=lone_batchnorm_models())
def test_a_lone_batchnorm_stays_whole_and_verifies_bit_equal(model):
    with tempfile.TemporaryDirectory(prefix="int8fix_") as tmp:
        result, qdq = converted_int8(model, Path(tmp) / "out")
        summary = result.report["summary"]
        note(str(summary))
        assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0)
        rng = np.random.default_rng(0)
        feeds = [{"x": rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
        comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
        note(str([(r.tensor, r.max_abs) for r in comparison.judged_rows]))
        assert comparison.passed and all(r.max_abs == 0 for r in comparison.judged_rows)
