"""Issue 45 finding 5: a QDQ transformer block from another quantizer (onnxruntime's
quantize_static defaults, per-tensor: int8 MatMuls, LayerNorm and GELU between QDQ pairs, int64
Gather embeddings) was cut into 7 Mrvl subgraphs where its float twin is 1. Run as its float
form (``--foreign-int8 fp16``) it is as whole as the twin: the QDQ pairs go, and the Relu the
quantizer folds into a range starting at 0 comes back only where the input is not known to be
non-negative (a GELU's 1 + erf(x) is, so the GELU keeps its form). Requantize (the default)
runs it so too: its 3-D MatMuls have no int8 form (``foreign_int8._no_int8_macs``)."""
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


def test_requantize_runs_a_block_without_int8_macs_whole_in_fp16(twin_and_qdq, tmp_path) -> None:
    """Its MatMuls are 3-D (the int8 FC takes 2-D): requantized, every MAC would still run in
    fp16, between int8 roundings, and LayerNorm/GELU between QDQ pairs cut the block into 3 Mrvl
    and 4 CPU pieces. Requantize runs it as fp16 does, says why, keeps the float form it ran
    (``<name>.float.onnx``) and verify passes against it; the cost against the model as given
    is reported beside the verdict."""
    from mrvl_convert.verify.compare import compare
    float_model, qdq = twin_and_qdq
    twin = mrvl_convert.convert(float_model, tmp_path / "twin").summary
    got = mrvl_convert.convert(qdq, tmp_path / "qdq")
    assert got.summary["mrvl_subgraphs"] == twin["mrvl_subgraphs"] == 1
    assert got.summary["cpu_subgraphs"] == twin["cpu_subgraphs"]
    section = got.report["foreign_int8"]
    assert section["mode"] == "requantize" and "3-D" in section["fp16_because"]
    assert "though requantize was asked" in section["line"]
    kept = got.manifest["foreign_int8"]
    assert kept["mode"] == "fp16" and kept["file"].endswith(".float.onnx")
    art = tmp_path / "qdq"
    result = compare(art / kept["file"], art, [bert_feeds(seed) for seed in range(4)], fp32=qdq)
    assert result.passed, result.summary_line()
    assert "verdict against the model without its QDQ nodes" in result.summary_line()
    assert result.fp32.against == "given" and result.fp32.rows[0].cosine is not None
