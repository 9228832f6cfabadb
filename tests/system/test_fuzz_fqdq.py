"""Fuzz: QDQ models from other quantizers (per-channel weights, uint8 or zero-point
activations) brought into the device's int8 (``frontend/foreign_int8.py``): nothing foreign is
left, every weight within half its new step of the given one, the cost measured, and the
conversion places every node once with a reason for the CPU."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import event, given, note, settings
from onnx import numpy_helper

import mrvl_convert
from support.strategies.fqdq import foreign_qdq_models

pytestmark = pytest.mark.system


def _dequantized_weights(model: onnx.ModelProto) -> dict:
    from mrvl_convert.frontend.qdq_graph import QdqGraph, dequantized
    graph = QdqGraph(model)
    out = {}
    for node in graph.qdq_nodes():
        source = graph.const(node.input[0])
        if node.op_type == "DequantizeLinear" and source is not None and source.dtype != np.int32:
            out[node.output[0]] = dequantized(graph, node, source)
    return out


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(gm=foreign_qdq_models())
def test_foreign_qdq_requantized(gm):
    from mrvl_convert.frontend.foreign_int8 import bring_foreign_int8
    from mrvl_convert.frontend.qdq_graph import QdqGraph
    note(gm.description)
    rewritten, done = bring_foreign_int8(gm.model)
    if done is None:
        event("nothing foreign")
        return
    assert done.left == []
    graph = QdqGraph(rewritten)
    assert not [n.name for n in graph.qdq_nodes() if graph.foreign(n)]
    given_w, new_w = _dequantized_weights(gm.model), _dequantized_weights(rewritten)
    for name, w in given_w.items():
        if name not in new_w:  # a Conv's weight with a BatchNormalization folded in (foreign_bn)
            assert done.batchnorms, name
            continue
        step = float(np.abs(w).max()) / 127
        assert float(np.abs(new_w[name] - w).max()) <= step / 2 * (1 + 1e-6) + 1e-12, name
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(gm.model, Path(tmp) / "fuzz")
    section = result.report["foreign_int8"]
    assert "error" not in section["cost"], section["cost"]
    for entry in result.report["nodes"]:
        if entry["placement"] == "cpu":
            assert entry.get("reason"), entry["name"]
    share = result.report["precision"]["shares"]["int8"]
    event(f"int8 MAC share {'>= 0.9' if share >= 0.9 else '< 0.9'}")
    scales = [numpy_helper.to_array(i) for i in rewritten.graph.initializer
              if i.name.endswith("_scale_s8")]
    assert all(s.size == 1 for s in scales)
