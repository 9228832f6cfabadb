"""Generated deepfilternet-enc-like networks (tests/support/strategies/i8einsum.py: any frames,
bins, groups, inner and hidden sizes, with or without the first Relu as a model output),
quantized by our recipe: one Mrvl subgraph, the depthwise Conv an int8 layer, the grouped-linear
Einsum rewritten, and the artifact bit-equal to its QDQ model (frontend/qdq.py,
frontend/einsum_forms.py, frontend/recurrent_reference.py)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, note, settings

from support.strategies.i8einsum import converted, enc_nets, verified

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(net=enc_nets())
def test_enc_like_networks_in_int8_are_one_subgraph_and_bit_equal(net):
    with tempfile.TemporaryDirectory(prefix="i8einsum_") as tmp:
        result = converted(net, Path(tmp) / "out")
        note(str(result.summary))
        placed = {n["name"]: n for n in result.report["nodes"]}
        assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0), [
            (n, p.get("reason")) for n, p in placed.items() if p["placement"] != "mrvl"]
        assert placed["depthwise"].get("rule") == "mrvl.qnn_conv2d", placed["depthwise"]
        comparison = verified(result, net)
        assert comparison.passed, comparison.summary_line()
        assert all(row.max_abs == 0 for row in comparison.judged_rows), \
            comparison.summary_line()
