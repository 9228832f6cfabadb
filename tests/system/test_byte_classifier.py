"""Issue 38's byte-level classifier (jax2tf's spelling) and SVTR block with BatchNorm1d
(tests/support/corpus_bytes.py), converted and verified against onnxruntime.

- the byte classifier: the one-hot at the int edge on CPU with its reason, everything after it
  (Expand, ReduceSum, ReduceMax, GlobalMaxPool on 3-D tensors, flax's LayerNorm) in one Mrvl
  subgraph, and ``mrvl_convert.compare`` passing over several samples where the tokens' mean is
  large next to their spread, the case where E[x^2] - E[x]^2 cancels in fp16
  (frontend/variance_form.py rewrites it);
- the SVTR block: one Mrvl subgraph with BatchNorm1d over tokens, written with the transposes
  torch writes around it or on the [B, C, L] tensor before them.
"""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from support import corpus_bytes

pytestmark = pytest.mark.system

#: The one-hot at the int edge: Unsqueeze of the int ids, Equal, Cast.
ONE_HOT = {"onehot_unsqueeze", "onehot_eq", "onehot_cast"}


@pytest.fixture(scope="module")
def byte_model(tmp_path_factory):
    model = corpus_bytes.byte_classifier(offset=16.0)
    return model, mrvl_convert.convert(model, tmp_path_factory.mktemp("bytes") / "art")


def test_byte_classifier_is_the_int_edge_on_cpu_then_one_mrvl_subgraph(byte_model):
    _, result = byte_model
    assert [s["kind"] for s in result.manifest["stages"]] == ["cpu", "mrvl"]
    on_cpu = {e["name"]: e for e in result.report["nodes"] if e["placement"] == "cpu"}
    assert set(on_cpu) == ONE_HOT
    assert "one-hot of integer ids" in on_cpu["onehot_eq"]["reason"]
    entries = {e["name"]: e for e in result.report["nodes"]}
    for name in ("ln_expand", "max_expand", "time_sum", "time_max", "channel_max"):
        assert entries[name]["placement"] == "mrvl", entries[name]
    assert "E[(x - E[x])^2]" in entries["ln_var"]["canonical"]


def test_byte_classifier_verifies_where_the_variance_form_would_cancel(byte_model):
    model, result = byte_model
    feeds = corpus_bytes.byte_feeds(seed=3, count=6)
    comparison = mrvl_convert.compare(model, result.out_dir, feeds)
    assert comparison.passed, comparison.to_dict()


@pytest.mark.parametrize("transposed", [True, False])
def test_svtr_block_with_batch_norm_1d_is_one_mrvl_subgraph(tmp_path, transposed):
    model = corpus_bytes.svtr_bn1d(transposed=transposed)
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    bn = "bn_tokens" if transposed else "bn_before"
    entry = next(e for e in result.report["nodes"] if e["name"] == bn)
    assert entry["rule"] == "mrvl.channel_affine"
    feeds = [{"x": np.random.default_rng(k).standard_normal((1, 64, 8, 16)).astype(np.float32)}
             for k in range(3)]
    comparison = mrvl_convert.compare(model, result.out_dir, feeds)
    assert comparison.passed, comparison.to_dict()
