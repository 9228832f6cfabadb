"""ViT's class-token idioms (frontend/token_forms.py): each rewrite computes on onnxruntime what
the original computes (as numbers: the sign of a zero may differ), the cases that are not the idiom stay as they were, and a class-token ViT
converts as one Mrvl subgraph.

The rank-3 StridedSlice's golden attributes follow princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateCompositeMrvlStridedSliceLayer``: it ICHECKs a 2-D or 4-D input (``layout_vec.size()``)
and writes data_layout NHWC for 4-D, so a token tensor's slice is written as NHWC [B, T, C, 1].
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import mrvl_convert
from support import corpus_transformer
from support.layer_chains import layers, the_layer
from support.models import Builder, canonicalized, run_ort

TOKENS, CHANNELS = 6, 5


def _feed(batch: int):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((batch, TOKENS, CHANNELS)) * 10.0 ** rng.integers(
        -3, 4, (batch, TOKENS, CHANNELS))).astype(np.float32)
    x.reshape(-1)[:5] = [0.0, -0.0, np.inf, -np.inf, np.nan]
    return {"x": x}


def _same(model, batch: int = 1):
    canonical, rewritten = canonicalized(model)
    feeds = _feed(batch)
    want, got = run_ort(model, feeds), run_ort(rewritten, feeds)
    for name, value in want.items():
        assert got[name].shape == value.shape
        # equal as numbers, NaN too: onnxruntime's Conv turns a -0.0 of x into +0.0
        assert np.array_equal(got[name], value, equal_nan=True), name
    return canonical


def _tokens(b: Builder, batch: int, k: int) -> str:
    value = np.random.default_rng(k).standard_normal((1, k, CHANNELS)).astype(np.float32)
    return b.const(np.repeat(value, batch, axis=0))


def _concat_model(batch: int, lead=(1,), trail=(), axis: int = 1):
    b = Builder(opset=13)
    x = b.input("x", [batch, TOKENS, CHANNELS])
    parts = [_tokens(b, batch, k) for k in lead] + [x] + [_tokens(b, batch, k) for k in trail]
    return b.model([b.op("Concat", parts, name="cat", axis=axis)])


@pytest.mark.parametrize("batch, lead, trail, axis", [
    (1, (1,), (), 1),          # ViT's class token
    (1, (1, 1), (), 1),        # DeiT's class and distillation tokens, two constants
    (1, (2,), (), -2),         # both in one constant, negative axis
    (1, (), (1,), 1),          # a trailing token
    (2, (1,), (), 1),          # batch 2: the tokens broadcast over it
    (2, (1,), (2,), 1),
])
def test_constant_tokens_concat_is_exact(batch, lead, trail, axis):
    canonical = _same(_concat_model(batch, lead, trail, axis), batch)
    assert "Concat" not in {n.op for n in canonical.graph.nodes}
    assert canonical.rewritten["cat"].startswith(f"Concat of {sum(lead)} constant token")
    derived = sorted(n for n, src in canonical.derived.items() if src == "cat")
    ops = {n.name: n for n in canonical.graph.nodes}
    assert sorted(ops[n].op for n in derived) == ["Conv", "Squeeze", "Unsqueeze"]
    conv = next(ops[n] for n in derived if ops[n].op == "Conv")
    assert list(conv.attrs["pads"]) == [sum(lead), 0, sum(trail), 0]
    add = ops["cat"]
    assert add.op == "Add" and add.inputs[1].values.shape[0] == 1  # one batch row


@pytest.mark.parametrize("index, expected", [(np.array(0), [0]), (np.array(-1), [TOKENS - 1]),
                                             (np.array([2]), [2])])
def test_token_gather_is_exact(index, expected):
    b = Builder(opset=13)
    x = b.input("x", [2, TOKENS, CHANNELS])
    model = b.model([b.op("Gather", [b.op("Relu", [x]), b.const(index.astype(np.int64))],
                          name="pick", axis=1)])
    canonical = _same(model, batch=2)
    ops = {n.name: n for n in canonical.graph.nodes}
    keeps_axis = index.ndim == 1
    assert ops["pick"].op == ("Slice" if keeps_axis else "Squeeze")
    slice_node = ops["pick"] if keeps_axis else next(
        ops[n] for n, src in canonical.derived.items() if src == "pick")
    assert slice_node.op == "Slice" and slice_node.inputs[1].values.tolist() == expected
    assert "Gather" not in {n.op for n in canonical.graph.nodes}


def _untouched(model):
    canonical, _ = canonicalized(model)
    # pick_forms.py and concat_views.py may take these (data movement); token_forms.py not
    mine = {n: why for n, why in canonical.rewritten.items() if "token" in why}
    assert not mine, mine
    return canonical


def test_constant_between_two_activations_is_not_rewritten():
    b = Builder(opset=13)
    x = b.input("x", [1, TOKENS, CHANNELS])
    y = b.op("Relu", [x])
    _untouched(b.model([b.op("Concat", [x, _tokens(b, 1, 1), y], axis=1)]))


def test_activations_on_both_sides_are_not_rewritten():
    b = Builder(opset=13)
    x = b.input("x", [1, TOKENS, CHANNELS])
    _untouched(b.model([b.op("Concat", [b.op("Relu", [x]), x], axis=1)]))


def test_rank_4_and_other_axes_are_not_rewritten():
    b = Builder(opset=13)
    x = b.input("x", [1, 3, TOKENS, CHANNELS])
    cat = b.op("Concat", [b.const(np.ones((1, 1, TOKENS, CHANNELS), np.float32)), x], axis=1)
    pick = b.op("Gather", [x, b.const(np.array(0, np.int64))], axis=1)
    _untouched(b.model([cat, pick]))
    b = Builder(opset=13)
    x = b.input("x", [1, TOKENS, CHANNELS])
    cat = b.op("Concat", [b.const(np.ones((1, TOKENS, 1), np.float32)), x], axis=2)
    pick = b.op("Gather", [x, b.const(np.array(0, np.int64))], axis=2)
    _untouched(b.model([cat, pick]))


@pytest.fixture(scope="module")
def class_token_vit(tmp_path_factory):
    model = corpus_transformer.vit_tiny(pool="token", blocks=1, channels=64, heads=4)
    return model, mrvl_convert.convert(model, tmp_path_factory.mktemp("vit") / "art")


def test_class_token_vit_is_one_mrvl_subgraph(class_token_vit):
    _, result = class_token_vit
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert not [e for e in result.report["nodes"] if e["placement"] == "cpu"]
    cat = next(e for e in result.report["nodes"] if e["op_type"] == "Concat"
               and e["placement"] == "mrvl")
    assert "became Unsqueeze, Conv 1x1" in cat["canonical"] and len(cat["derived"]) == 3


def test_no_layout_transform_around_the_token_rows_conv(class_token_vit):
    """[B, 1, T, C] is NHWC [B, T, C, 1]: the same bytes as the token tensor."""
    _, result = class_token_vit
    found = layers(result)
    at = next(i for i, n in enumerate(found) if n["attrs"]["layer_name"] == ["Conv2D"]
              and any(s.endswith("_pad_rows") for s in n["attrs"]["source_nodes"]))
    assert [n["attrs"]["layer_name"][0] for n in found[at - 1:at + 2]] == \
        ["expand_dims", "Conv2D", "squeeze"]
    assert found[at - 1]["attrs"]["out_layout_shape"] == ["1", "64", "64", "1"]


def test_token_strided_slice_is_written_4d(class_token_vit):
    _, result = class_token_vit
    attrs = the_layer(result, "StridedSlice")["attrs"]
    assert (attrs["data_layout"], attrs["out_layout"]) == (["NHWC"], ["NHWC"])
    assert attrs["data_layout_shape"] == ["1", "65", "64", "1"]
    assert attrs["out_layout_shape"] == ["1", "1", "64", "1"]
    assert attrs["begin"] == ["0", "0", "0", "0"]
    assert attrs["end"] == ["1", "1", "64", "1"]
    assert attrs["strides"] == ["1", "1", "1", "1"]
    assert attrs["slice_mode"] == ["end"]


def test_class_token_vit_runs_within_fp16_tolerance(class_token_vit):
    model, result = class_token_vit
    rng = np.random.default_rng(0)
    feeds = {"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    comparison = mrvl_convert.compare(model, result.out_dir, feeds)
    assert comparison.passed, json.dumps(comparison.to_dict())[:2000]


def test_mean_pooled_vit_is_still_one_mrvl_subgraph(tmp_path):
    result = mrvl_convert.convert(corpus_transformer.vit_tiny(pool="mean", blocks=1, channels=64,
                                                           heads=4), tmp_path)
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert not [e for e in result.report["nodes"] if e["placement"] == "cpu"]
    assert "StridedSlice" not in {n["attrs"]["layer_name"][0] for n in layers(result)}
