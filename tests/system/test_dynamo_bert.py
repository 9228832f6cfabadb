"""A BERT-Tiny-width encoder as torch.onnx's dynamo exporter writes it
(tests/support/corpus_dynamo.py): dynamic ``s0``/``s1`` input dims fixed at conversion,
``sym_size_int`` (``Shape`` with ``start``/``end``, then ``Squeeze``), position ids from
``node_arange`` (``Range(0, sym_size_int, 1)``) and weight-only int8 linear weights
(``Cast -> Mul(scale)``).

It converts to one Mrvl subgraph after its int64 work at the edge (the embedding Gather and the
mask's Unsqueeze, Cast and Sub, on CPU), with no Range, Shape or weight Cast left anywhere, and
the hybrid run is within fp16 tolerance of onnxruntime on the original (``mrvl_convert.compare``
on several samples). Before, the conversion failed: graphsurgeon folded ``Shape(start, end)`` to
the whole shape, so no fold of the model succeeded and the Range was refused for its unknown size.
"""
from __future__ import annotations

import pytest

import mrvl_convert
from support import corpus_dynamo

pytestmark = pytest.mark.system

#: BERT's int64 work at the model's edge: ids and mask, before the accelerator stage.
INT64_EDGE = {"Gather", "Unsqueeze", "Cast", "Sub"}
SAMPLES = 4


@pytest.mark.parametrize("layers", [1, 2])
def test_a_dynamo_bert_with_weight_only_int8_is_one_mrvl_subgraph_and_verifies(tmp_path,
                                                                                layers):
    model = corpus_dynamo.dynamo_bert(layers=layers)
    result = mrvl_convert.convert(model, tmp_path / "art", shapes=corpus_dynamo.bert_shapes())
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds.count("mrvl") == 1, kinds
    nodes = result.report["nodes"]
    on_cpu = [e for e in nodes if e["placement"] == "cpu"]
    assert {e["op_type"] for e in on_cpu} <= INT64_EDGE, on_cpu
    folded = {e["op_type"] for e in nodes if e["placement"] == "removed"}
    assert {"Range", "Shape", "Squeeze"} <= folded, folded
    # The weights' Cast and Mul are folded into float weights: only the mask's Cast is left.
    assert [e["name"] for e in on_cpu if e["op_type"] == "Cast"] == ["node_Cast_20"]
    comparison = mrvl_convert.compare(model, tmp_path / "art",
                                      [corpus_dynamo.bert_feeds(s) for s in range(SAMPLES)])
    assert comparison.samples == SAMPLES
    assert comparison.passed, comparison
