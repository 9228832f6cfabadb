"""The transformers of the partition corpus (tests/support/corpus_transformer.py): ViT, BERT, an
SVTR mixing block and YOLO11's C2PSA, as exporters write them.

Each is one Mrvl subgraph (BERT: after its int64 work on CPU at the edge: the embedding Gather
and the mask's Unsqueeze, Cast and Sub), with >= 95% of the MACs on the accelerator, and the
hybrid run within fp16 tolerance of onnxruntime (``mrvl_convert.compare``).

Their LayerNorm and GELU chains (nodes named ``ln_*`` / ``gelu_*`` by the corpus) run on the
accelerator, every node of them: a chain that falls back to the CPU fails
``test_no_layer_norm_or_gelu_node_leaves_the_accelerator``, which a planted fallback (the
conversion without the LayerNorm or GELU rule) checks.
"""
from __future__ import annotations

import importlib
from typing import Dict, List

import numpy as np
import onnx
import pytest

import mrvl_convert
from support import corpus, corpus_transformer
from support.models import run_ort

pytestmark = pytest.mark.system

NAMES = tuple(corpus_transformer.MODELS)
#: BERT's int64 work at the model's edge: ids and mask, before the accelerator stage.
#: The mask's ``1 - m`` runs on the accelerator (``canonical_forms``: c - x as -x + c).
INT64_EDGE = {"Gather", "Unsqueeze", "Cast"}
#: The chains each model has (``corpus_transformer.PIECES``): C2PSA has neither.
CHAINS = {"vit_tiny": {"ln_", "gelu_"}, "bert_tiny": {"ln_", "gelu_"},
          "svtr_mix": {"ln_", "gelu_"}, "c2psa": set()}


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Dict[str, object]:
    cache: Dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            model = corpus.built(name)
            out = tmp_path_factory.mktemp(name) / "art"
            cache[name] = (model, mrvl_convert.convert(model, out))
        return cache[name]
    return get


def _feed(name: str, model: onnx.ModelProto) -> Dict[str, np.ndarray]:
    return corpus_transformer.bert_feeds() if name == "bert_tiny" else corpus.feeds(model)


def _on_cpu(result) -> List[dict]:
    return [e for e in result.report["nodes"] if e["placement"] == "cpu"]


def _chain_nodes(result) -> List[dict]:
    return [e for e in result.report["nodes"]
            if e["name"].startswith(corpus_transformer.PIECES)]


def _chain_fallbacks(result) -> List[tuple]:
    """The LayerNorm / GELU nodes not on the accelerator, with where they are and why."""
    return [(e["name"], e["placement"], e.get("reason", "")) for e in _chain_nodes(result)
            if e["placement"] != "mrvl"]


def _convert_without(model: onnx.ModelProto, out, rule_names, monkeypatch):
    """``model`` converted with the built-in rules less ``rule_names``: a planted fallback."""
    module = importlib.import_module("mrvl_convert.convert")
    real = module.load_rules
    monkeypatch.setattr(module, "load_rules", lambda *args, **kwargs: [
        r for r in real(*args, **kwargs) if r.name not in rule_names])
    return mrvl_convert.convert(model, out)


def test_models_are_in_the_corpus_valid_and_finite():
    for name in NAMES:
        assert name in corpus.BUILT
        model = corpus.built(name)
        onnx.checker.check_model(model, full_check=True)
        [out] = run_ort(model, _feed(name, model)).values()
        declared = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
        assert list(out.shape) == declared and declared[0] == 1
        assert np.all(np.isfinite(out)) and 0.1 < float(np.abs(out).max()) < 100, name


@pytest.mark.parametrize("name", NAMES)
def test_hybrid_is_within_fp16_tolerance_of_onnxruntime(converted, name):
    model, result = converted(name)
    comparison = mrvl_convert.compare(model, result.out_dir, _feed(name, model))
    assert comparison.passed, comparison.to_dict()


@pytest.mark.parametrize("name", NAMES)
def test_at_least_95_percent_of_the_macs_run_on_the_accelerator(converted, name):
    _, result = converted(name)
    assert result.summary["mrvl_mac_share"] >= 0.95, result.summary


@pytest.mark.parametrize("name", NAMES)
def test_no_layer_norm_or_gelu_node_leaves_the_accelerator(converted, name):
    _, result = converted(name)
    groups = {prefix for prefix in corpus_transformer.PIECES
              if any(e["name"].startswith(prefix) for e in _chain_nodes(result))}
    assert groups == CHAINS[name]
    assert not _chain_fallbacks(result)


@pytest.mark.parametrize("rule, prefix", [("mrvl.layer_norm", "ln_"), ("mrvl.gelu_erf", "gelu_")])
def test_a_layer_norm_or_gelu_fallback_is_seen(rule, prefix, tmp_path, monkeypatch):
    """The check above fails when a chain falls back: BERT converted without the rule of its
    LayerNormalization op, or of its erf GELU."""
    result = _convert_without(corpus.built("bert_tiny"), tmp_path / "art", {rule}, monkeypatch)
    fallbacks = _chain_fallbacks(result)
    assert fallbacks and all(n.startswith(prefix) for n, _, _ in fallbacks), fallbacks


@pytest.mark.parametrize("name", NAMES)
def test_nothing_but_bert_int64_work_leaves_the_accelerator(converted, name):
    """Shape arithmetic folded, head split and merge, the 4-D attention of C2PSA, the additive
    mask, ViT's class token (its Concat rewritten, ``frontend/token_forms.py``) and the head's
    read of it: all on the accelerator; what is left, for BERT only, is the int64 edge."""
    _, result = converted(name)
    on_cpu = [(e["name"], e["op_type"], e.get("reason", "")) for e in _on_cpu(result)]
    if name == "bert_tiny":
        assert sorted(op for _, op, _ in on_cpu) == sorted(INT64_EDGE), on_cpu
        gather = next(e for e in result.report["nodes"] if e["op_type"] == "Gather"
                      and e["placement"] == "cpu")
        assert "embedding lookup by token ids runs on CPU" in gather["reason"]
    else:
        assert not on_cpu, on_cpu
    shape_ops = [e for e in result.report["nodes"]
                 if e["op_type"] in ("Shape", "Concat", "Range") and e["placement"] != "removed"
                 and not (name == "c2psa" and e["op_type"] == "Concat")
                 and not e.get("canonical", "").startswith("Concat of 1 constant token")]
    assert not shape_ops, shape_ops


@pytest.mark.parametrize("name", NAMES)
def test_each_model_is_one_mrvl_subgraph(converted, name):
    _, result = converted(name)
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds == (["cpu", "mrvl"] if name == "bert_tiny" else ["mrvl"]), kinds
    assert result.summary["mrvl_subgraphs"] == 1


def test_c2psa_attention_runs_as_batch_matmuls_on_the_accelerator(converted):
    """[B, heads, dims, N] split along the dims, q^T k and v attn^T: products of two
    activations (BatchMatmul), the positional depthwise Conv on v, the Split of cv1."""
    _, result = converted("c2psa")
    entries = result.report["nodes"]
    matmuls = [e for e in entries if e["op_type"] == "MatMul"]
    assert len(matmuls) == 2 and {e["rule"] for e in matmuls} == {"mrvl.batch_matmul"}
    assert {e["placement"] for e in entries if e["op_type"] in ("Split", "Softmax", "Conv")} \
        == {"mrvl"}
