"""Generated CNNs with a constant minus an activation between two Convs: canonicalize's
``Sub(c, x) -> Add(Mul(x, -1), c)`` is bit-exact on onnxruntime, and the model converts whole
(one Mrvl stage, no CPU node) and verifies against onnxruntime fp32, whatever the constant's
shape, values, widths and sizes. Generated packed Q/K/V attentions quantized by our recipe
convert as one stage equal to their QDQ model (``frontend/packed_qkv.py``)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note, settings

import mrvl_convert
from support.int8 import converted_int8
from support.models import canonicalized, run_ort
from support.strategies.newfam import const_minus_cnns, packed_attentions

pytestmark = pytest.mark.system


def _feed(model, seed: int = 0):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)}


@settings(max_examples=max(5, settings.default.max_examples // 4), deadline=None)
@given(model=const_minus_cnns())
def test_const_minus_rewrite_is_bit_exact(model):
    canonical, rewritten = canonicalized(model)
    assert "Sub" not in {n.op for n in canonical.graph.nodes}
    # Unoptimized: onnxruntime folds a Mul and an Add of constants after a Conv into its
    # weights and bias (ConvMulFusion, ConvAddFusion), its own rounding, not the rewrite's.
    want = run_ort(model, _feed(model), optimize=False)
    got = run_ort(rewritten, _feed(model), optimize=False)
    assert all(want[k].tobytes() == got[k].tobytes() for k in want)


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(model=const_minus_cnns())
def test_const_minus_between_convs_converts_whole_and_verifies(model):
    with tempfile.TemporaryDirectory(prefix="newfam_") as tmp:
        result = mrvl_convert.convert(model, Path(tmp) / "out")
        note(str(result.summary))
        assert (result.summary["mrvl_subgraphs"], result.summary["cpu_nodes"]) == (1, 0)
        comparison = mrvl_convert.compare(model, result.out_dir, [_feed(model, s) for s in range(2)])
        note(str([(r.tensor, r.max_abs) for r in comparison.judged_rows]))
        assert comparison.passed


@settings(max_examples=max(3, settings.default.max_examples // 8), deadline=None)
@given(model=packed_attentions())
def test_int8_packed_attention_is_one_stage_equal_to_its_qdq_model(model):
    """Our recipe's QDQ pairs on the split's Reshape, Transpose and Slices are bypassed as
    identities: one Mrvl stage, and verify against the QDQ model passes."""
    with tempfile.TemporaryDirectory(prefix="newfam_") as tmp:
        result, qdq = converted_int8(model, Path(tmp) / "out")
        note(str(result.summary))
        assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        feeds = [{"x": np.random.default_rng(s).uniform(-1, 1, shape).astype(np.float32)}
                 for s in range(2)]
        comparison = mrvl_convert.compare(qdq, result.out_dir, feeds, with_floor=False)
        note(str([(r.tensor, r.max_abs) for r in comparison.judged_rows]))
        assert comparison.passed
