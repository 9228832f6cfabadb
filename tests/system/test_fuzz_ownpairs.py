"""Generated CNNs with a float op between two Convs (an Elu, also behind an NHWC Transpose and
a batch Squeeze as madmom writes it; a LayerNorm over the channels; an Erf GELU), quantized by
our recipe, which drops the QDQ pairs between ops of no int8 form: the artifact is bit-equal to
its QDQ model under verify's reference, whatever the widths, sizes and weights."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note, settings

import mrvl_convert
from support.int8 import converted_int8
from support.strategies.ownpairs import float_op_cnns

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(model=float_op_cnns())
def test_float_ops_between_int8_convs_verify_bit_equal(model):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    with tempfile.TemporaryDirectory(prefix="ownpairs_") as tmp:
        result, qdq = converted_int8(model, Path(tmp) / "out")
        note(str(result.summary))
        rng = np.random.default_rng(0)
        feeds = [{"x": rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(3)]
        comparison = mrvl_convert.compare(qdq, result.out_dir, feeds, with_floor=False)
        note(str([(r.tensor, r.max_abs) for r in comparison.judged_rows]))
        assert comparison.passed and all(r.max_abs == 0 for r in comparison.judged_rows)
