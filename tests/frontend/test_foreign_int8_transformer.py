"""Issue 45 finding 5: a QDQ transformer block from another quantizer (onnxruntime's
quantize_static defaults, per-tensor: int8 MatMuls, LayerNorm and GELU between QDQ pairs, int64
Gather embeddings) was cut into 7 Mrvl subgraphs where its float twin is 1. Run as its float
form (``--foreign-int8 fp16``) it is as whole as the twin: the QDQ pairs go, and the Relu the
quantizer folds into a range starting at 0 comes back only where the input is not known to be
non-negative (a GELU's 1 + erf(x) is, so the GELU keeps its form). Requantize (the default)
runs its token FCs in int8 (``mrvl.qnn_fc_tokens``); a model whose MatMuls all multiply two
activations has no int8 MAC and runs as fp16 does (``foreign_int8._no_int8_macs``)."""
from __future__ import annotations

import pytest

import mrvl_convert
from support.corpus_transformer import bert_feeds, bert_tiny
from support.foreign_qdq import foreign_quantized


@pytest.fixture(scope="module")
def twin_and_qdq():
    float_model = bert_tiny()
    qdq = foreign_quantized(float_model, per_channel=False, activation="QInt8",
                            feeds=[bert_feeds(seed) for seed in range(4)])
    return float_model, qdq


def test_the_qdq_block_in_fp16_is_as_whole_as_its_float_twin(twin_and_qdq, tmp_path) -> None:
    float_model, qdq = twin_and_qdq
    twin = mrvl_convert.convert(float_model, tmp_path / "twin").summary
    got = mrvl_convert.convert(qdq, tmp_path / "qdq", foreign_int8="fp16")
    summary = got.summary
    assert summary["mrvl_subgraphs"] == twin["mrvl_subgraphs"] == 1
    assert summary["cpu_subgraphs"] == twin["cpu_subgraphs"]
    assert summary["mrvl_mac_share"] >= 0.9
    assert got.report["foreign_int8"]["mode"] == "fp16"
    rules = {e.get("rule") for e in got.placements}
    assert "mrvl.gelu_erf" in rules and "mrvl.layer_norm" in rules


def test_requantized_the_block_keeps_its_macs_on_the_accelerator(twin_and_qdq, tmp_path) -> None:
    """Requantize (the default): every MAC runs on the accelerator and the line says what it
    cost against the given model."""
    _, qdq = twin_and_qdq
    got = mrvl_convert.convert(qdq, tmp_path / "qdq")
    assert got.summary["mrvl_mac_share"] >= 0.9
    section = got.report["foreign_int8"]
    assert section["mode"] == "requantize" and not section["left"]
    assert "cost against the given QDQ model: max |diff|" in section["line"]


def test_requantize_runs_the_blocks_token_fcs_in_int8(twin_and_qdq, tmp_path) -> None:
    """Its projections and FFN are MatMuls of [B, T, C] tokens by constant weights: requantized,
    the int8 FC on tokens takes them (main ran the block in fp16: "none of its 8 MatMuls has an
    int8 form"); only attention's two MatMuls of activations stay fp16. The LayerNorm and GELU
    the quantizer left between QDQ pairs have no int8 form: their pairs are dropped
    (``float_pairs.py``) and they run as fp16 layers inside the int8 region, as whole as the
    float twin (1 Mrvl subgraph; the integration branch before it: 3). verify against the
    requantized QDQ model the artifact keeps is bit-equal."""
    from mrvl_convert.verify.compare import compare
    _, qdq = twin_and_qdq
    got = mrvl_convert.convert(qdq, tmp_path / "qdq")
    section = got.report["foreign_int8"]
    assert section["mode"] == "requantize" and not section.get("fp16_because")
    assert got.report["precision"]["shares"]["int8"] > 0.9
    assert got.summary["mrvl_subgraphs"] == 1, got.summary
    fcs = [e for e in got.placements
           if e.get("rule") == "mrvl.qnn_fc_tokens" and e["op_type"] == "MatMul"]
    assert len(fcs) == 6
    kept = got.manifest["foreign_int8"]
    assert kept["mode"] == "requantize"
    art = tmp_path / "qdq"
    result = compare(art / kept["file"], art, [bert_feeds(seed) for seed in range(4)])
    assert result.passed, result.summary_line()
    assert all(row.max_abs == 0.0 for row in result.rows if row.kind == "output")


def test_requantize_runs_a_model_without_int8_macs_in_fp16(tmp_path) -> None:
    """A model whose only MatMul multiplies two activations ([1, 8, 16] by its transpose) has
    no int8 MAC: requantize runs it as fp16 does and says why."""
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="t", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["x", "xt"], ["y"], name="scores")]
    model = helper.make_model(helper.make_graph(nodes, "scores", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    qdq = foreign_quantized(model, per_channel=False, activation="QInt8")
    section = mrvl_convert.convert(qdq, tmp_path / "qdq").report["foreign_int8"]
    assert "has an int8 form" in section["fp16_because"]
    assert "though requantize was asked" in section["line"]
