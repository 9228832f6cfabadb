"""Fuzz: a transformer block quantized by onnxruntime (per-tensor or per-channel, int8 or uint8
activations) converts as whole as its float twin, its six token FCs int8, and the artifact
equals the requantized QDQ model it keeps bit for bit, its LayerNorm, GELU and attention fp16
layers rounded where the artifact rounds them (``frontend/float_pairs.py``,
``verify/fp16_chains.py``; issue 45)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, note, settings

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.strategies.qdqwhole import qdq_blocks

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 10), deadline=None)
@given(block=qdq_blocks())
def test_a_qdq_block_is_as_whole_as_its_float_twin(block):
    note(block.description)
    with tempfile.TemporaryDirectory() as tmp:
        twin = mrvl_convert.convert(block.twin, Path(tmp) / "twin").summary
        got = mrvl_convert.convert(block.qdq, Path(tmp) / "q")
        summary = got.summary
        assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (
            twin["mrvl_subgraphs"], twin["cpu_subgraphs"])
        fcs = [e for e in got.placements
               if e.get("rule") == "mrvl.qnn_fc_tokens" and e["op_type"] == "MatMul"]
        assert len(fcs) == 6, got.report["precision"]
        kept = got.manifest["foreign_int8"]["file"]
        result = compare(Path(tmp) / "q" / kept, Path(tmp) / "q", block.feeds,
                         with_floor=False)
        assert result.passed, result.summary_line()
        assert all(row.max_abs == 0.0 for row in result.rows if row.kind == "output"), \
            result.summary_line()
