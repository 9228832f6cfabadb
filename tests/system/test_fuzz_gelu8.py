"""Generated GELU blocks (every form of ``support/strategies/gelu8.py``, widths, weights, int8 or
uint8 activations, the spread of x) quantized by onnxruntime's quantize_static: whatever pairs it
put inside the GELU, the artifact is one Mrvl subgraph holding a GELU composite, bit-equal to its
QDQ model under verify's reference (``rules/float_spans.py``, ``verify/fp16_chains.py``)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, note, settings

import mrvl_convert
from support.foreign_qdq import foreign_quantized
from support.strategies.gelu8 import gelu_blocks, token_feeds

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(drawn=gelu_blocks())
def test_a_quantized_gelu_is_one_fp16_composite_bit_equal(drawn):
    model, form, tokens, channels, activation, spread = drawn
    note(f"{form} {tokens}x{channels} {activation} spread {spread}")
    qdq = foreign_quantized(model, per_channel=False, activation=activation,
                            feeds=token_feeds(8, 1, tokens, channels, spread))
    with tempfile.TemporaryDirectory(prefix="gelu8_") as tmp:
        got = mrvl_convert.convert(qdq, Path(tmp) / "out")
        assert (got.summary["mrvl_subgraphs"], got.summary["cpu_subgraphs"]) == (1, 0)
        rules = {e.get("rule") for e in got.placements}
        assert rules & {"mrvl.gelu_erf", "mrvl.gelu_tanh_form"}, rules
        kept = got.out_dir / got.manifest["foreign_int8"]["file"]
        result = mrvl_convert.compare(kept, got.out_dir,
                                      token_feeds(3, 7, tokens, channels, spread),
                                      with_floor=False)
        note(result.summary_line())
        assert result.passed and all(r.max_abs == 0 for r in result.judged_rows)
