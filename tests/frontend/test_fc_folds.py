"""Constant scales folded into the FC reading them (frontend/fc_folds.py): the LayerNorm fold is
within its float32 bound of the original on onnxruntime (and a wrongly folded shift is not),
the attention-scale fold is exact, the cases that are not the idiom stay as they were, and the
corpus ViT converts to fewer Mul2D / Sum2D layers as one Mrvl subgraph within fp16 tolerance."""
from __future__ import annotations

import json
from typing import Dict, Optional, Tuple

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import mrvl_convert
import mrvl_convert.frontend.canonicalize as canonicalize_module
from support import corpus_transformer
from support.layer_chains import convert_and_compare, layers
from support.models import Builder, canonicalized, run_ort

TOKENS, CHANNELS, EPS = 6, 16, 1e-5
U32 = 2.0 ** -24
RNG = np.random.default_rng(7)
GAMMA = (1 + 0.5 * RNG.standard_normal(CHANNELS)).astype(np.float32)
BETA = (0.5 * RNG.standard_normal(CHANNELS)).astype(np.float32)


def _x(shape) -> Dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(3).standard_normal(shape) * 3 + 1).astype(np.float32)}


def _layer_norm(b: Builder, x: str, form: str, gamma=GAMMA, beta=BETA, swap=False) -> str:
    g, s = b.const(gamma), b.const(beta)
    if form == "op":
        return b.op("LayerNormalization", [x, g, s], name="ln", axis=-1, epsilon=EPS)
    mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Mul", [d, d])], axes=[-1], keepdims=1)
    n = b.op("Div", [d, b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(EPS))])])],
             name="normalised")
    m = b.op("Mul", [g, n] if swap else [n, g], name="ln_scale")
    return b.op("Add", [s, m] if swap else [m, s], name="ln_shift")


def _fc(b: Builder, y: str, name: str, bias: bool, fout: int = 8, gemm: bool = False
        ) -> Tuple[str, np.ndarray, Optional[np.ndarray]]:
    """A MatMul [+ Add] or a Gemm (transB) reading y: (output, W [C, O], b or None)."""
    w = (RNG.standard_normal((CHANNELS, fout)) / 4).astype(np.float32)
    bias_v = (RNG.standard_normal(fout) * 0.3).astype(np.float32) if bias else None
    if gemm:
        inputs = [y, b.const(w.T.copy())] + ([b.const(bias_v)] if bias else [])
        return b.op("Gemm", inputs, name=name, transB=1), w, bias_v
    out = b.op("MatMul", [y, b.const(w)], name=name)
    if bias:
        out = b.op("Add", [b.const(bias_v), out], name=f"{name}_add")
    return out, w, bias_v


def _pre_norm(form: str, swap: bool = False, gemm: bool = False):
    b = Builder(opset=17 if form == "op" else 13)
    shape = [TOKENS, CHANNELS] if gemm else [1, TOKENS, CHANNELS]
    y = _layer_norm(b, b.input("x", shape), form, swap=swap)
    fcs = [_fc(b, y, "fc_bias", True, gemm=gemm), _fc(b, y, "fc_plain", False, gemm=gemm)]
    return b.model([o for o, _, _ in fcs]), {o: (w, bias) for o, w, bias in fcs}, shape


def _bound(x: np.ndarray, w: np.ndarray, bias: Optional[np.ndarray]) -> np.ndarray:
    """(2 C + 6) u (S + T + |b|) per output element (fc_folds.py's float32 bound)."""
    x = x.astype(np.float64)
    d = x - x.mean(-1, keepdims=True)
    n = d / np.sqrt((d * d).mean(-1, keepdims=True) + EPS)
    s = np.abs(n) @ (np.abs(GAMMA)[:, None] * np.abs(w))
    t = np.abs(BETA) @ np.abs(w)
    b = 0 if bias is None else np.abs(bias)
    return (2 * CHANNELS + 6) * U32 * (s + t + b)


def _within(model, proto, fcs, shape) -> bool:
    feeds = _x(shape)
    want, got = run_ort(model, feeds), run_ort(proto, feeds)
    return all(np.all(np.abs(got[o] - want[o]) <= _bound(feeds["x"], w, bias))
               for o, (w, bias) in fcs.items())


def _wrong_shift(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The folded model with b' = b (beta @ W left out) in every folded bias."""
    wrong = onnx.ModelProto()
    wrong.CopyFrom(proto)
    for init in wrong.graph.initializer:
        if "_bias_folded" in init.name:
            value = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(np.zeros_like(value), init.name))
    return wrong


@pytest.mark.parametrize("form, swap, gemm", [("decomposed", False, False),
                                              ("decomposed", True, False),
                                              ("decomposed", False, True),
                                              ("op", False, False), ("op", False, True)])
def test_pre_norm_layer_norm_is_folded_within_the_float32_bound(form, swap, gemm):
    model, fcs, shape = _pre_norm(form, swap, gemm)
    canonical, proto = canonicalized(model)
    assert _within(model, proto, fcs, shape)
    assert not _within(model, _wrong_shift(proto), fcs, shape)   # the bound can fail
    ops = {n.name: n for n in canonical.graph.nodes}
    if form == "op":
        ln = ops["ln"]
        assert len(ln.inputs) == 3 and np.all(ln.inputs[1].values == 1)
        assert not np.any(ln.inputs[2].values)   # zeros, not absent: onnxruntime 1.18
        assert "folded into the FCs" in canonical.rewritten["ln"]
    else:
        assert canonical.merged == {"ln_scale": "fc_bias", "ln_shift": "fc_bias"}
        assert ops["fc_bias"].inputs[0].name == "normalised_out"
    assert "scale and shift before it (a pre-norm LayerNorm's) folded into its weight" in \
        canonical.rewritten["fc_plain"]


def test_matmul_without_bias_gets_one():
    model, _, _ = _pre_norm("decomposed")
    canonical, _ = canonicalized(model)
    ops = {n.name: n for n in canonical.graph.nodes}
    [added] = [n for n, origin in canonical.derived.items() if origin == "fc_plain"]
    assert ops[added].op == "Add" and ops[added].inputs[0] is ops["fc_plain"].outputs[0]
    assert ops[added].outputs[0].name == "fc_plain_out"   # the MatMul's output, as before
    assert "fc_bias" not in canonical.derived.values()    # its own Add takes the shift


def _untouched(model: onnx.ModelProto):
    canonical, _ = canonicalized(model)
    assert not canonical.merged, canonical.merged
    assert not any("folded" in v for v in canonical.rewritten.values()), canonical.rewritten


@pytest.mark.parametrize("form", ["decomposed", "op"])
def test_post_norm_is_not_folded(form):
    b = Builder(opset=17 if form == "op" else 13)
    x = b.input("x", [1, TOKENS, CHANNELS])
    y = _layer_norm(b, x, form)
    out, _, _ = _fc(b, y, "fc", True, fout=CHANNELS)
    _untouched(b.model([b.op("Add", [y, out], name="residual")]))


def test_scale_not_over_the_last_axis_is_not_folded():
    b = Builder()
    x = b.input("x", [1, TOKENS, CHANNELS])
    over_tokens = (1 + RNG.standard_normal((TOKENS, 1))).astype(np.float32)
    y = _layer_norm(b, x, "decomposed", gamma=over_tokens)
    _untouched(b.model([_fc(b, y, "fc", True)[0]]))


HEADS, DEPTH = 2, 8


def _heads(b: Builder, x: str, perm, bias: bool = True) -> Tuple[str, str]:
    """(the linear's output, its head split) of x [1, T, H * D]."""
    y, _, _ = _fc(b, x, f"fc_{len(b.nodes)}", bias, fout=HEADS * DEPTH)
    split = b.op("Reshape", [y, b.const(np.array([1, TOKENS, HEADS, DEPTH], np.int64))])
    return y, b.op("Transpose", [split], perm=perm)


def _attention(op: str = "Mul", c: float = 0.25, extra_q_reader: bool = False,
               sdpa: Optional[float] = None):
    b = Builder()
    x = b.input("x", [1, TOKENS, CHANNELS])
    q_linear, q = _heads(b, x, [0, 2, 1, 3])
    _, k = _heads(b, x, [0, 2, 3, 1], bias=False)
    if sdpa is not None:
        q = b.op("Mul", [q, b.const(np.float32(sdpa))], name="scale_q")
        k = b.op("Mul", [k, b.const(np.float32(sdpa))], name="scale_k")
    scores = b.op("MatMul", [q, k])
    if sdpa is None:
        scores = b.op(op, [scores, b.const(np.float32(c))], name="scale")
    outputs = [b.op("Softmax", [scores], axis=-1)]
    if extra_q_reader:
        outputs.append(b.op("Relu", [q_linear]))
    return b.model(outputs)


def _exact(model: onnx.ModelProto):
    canonical, proto = canonicalized(model)
    feeds = _x([1, TOKENS, CHANNELS])
    want, got = run_ort(model, feeds), run_ort(proto, feeds)
    for name, value in want.items():
        assert np.array_equal(got[name], value), name
    return canonical


@pytest.mark.parametrize("op, c", [("Mul", 0.25), ("Div", 8.0), ("Mul", 2.0)])
def test_power_of_two_attention_scale_is_folded_exactly(op, c):
    canonical = _exact(_attention(op, c))
    assert list(canonical.merged) == ["scale"]
    q_fc = canonical.merged["scale"]
    factor = 1 / c if op == "Div" else c
    assert f"scaled by {factor:g}" in canonical.rewritten[q_fc]
    assert not [n for n in canonical.graph.nodes if n.op in ("Mul", "Div")]


def test_sdpa_scales_are_folded_into_their_own_fcs():
    canonical = _exact(_attention(sdpa=0.5))
    assert sorted(canonical.merged) == ["scale_k", "scale_q"]
    assert canonical.merged["scale_q"] != canonical.merged["scale_k"]


@pytest.mark.parametrize("kwargs", [{"c": 0.3}, {"extra_q_reader": True}, {"sdpa": 0.3}])
def test_attention_scale_not_folded(kwargs):
    _untouched(_attention(**kwargs))


def _without_folds(monkeypatch) -> None:
    monkeypatch.setattr(canonicalize_module, "fold_into_fcs", lambda graph, done: False)


def _count(result, *kinds: str) -> int:
    return sum(n["attrs"]["layer_name"][0] in kinds for n in layers(result))


def test_layer_norm_op_before_an_fc_is_seven_layers(tmp_path, monkeypatch):
    b = Builder(opset=17)
    y = _layer_norm(b, b.input("x", [1, TOKENS, CHANNELS]), "op")
    model = b.model([_fc(b, y, "fc", True, fout=32)[0]])
    folded = convert_and_compare(model, tmp_path / "folded")
    _without_folds(monkeypatch)
    plain = convert_and_compare(model, tmp_path / "plain")
    assert _count(plain, "Mul2D", "Sum2D") - _count(folded, "Mul2D", "Sum2D") == 2
    assert len(layers(plain)) - len(layers(folded)) == 2


def test_corpus_vit_has_fewer_layers_and_is_one_subgraph_in_tolerance(tmp_path, monkeypatch):
    model = corpus_transformer.vit_tiny(blocks=1)
    folded = mrvl_convert.convert(model, tmp_path / "folded")
    with monkeypatch.context() as patch:
        _without_folds(patch)
        plain = mrvl_convert.convert(model, tmp_path / "plain")
    # two LayerNorms' Mul and Add each, the attention scale's Mul
    assert _count(plain, "Mul2D", "Sum2D") - _count(folded, "Mul2D", "Sum2D") == 5
    assert [s["kind"] for s in folded.manifest["stages"]] == ["mrvl"]
    merged = [e for e in folded.report["nodes"] if e.get("merged_into")]
    assert len(merged) == 5 and all(e["placement"] == "mrvl" for e in merged)
    feeds = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(
        np.float32)}
    comparison = mrvl_convert.compare(model, folded.out_dir, feeds, layers=True)
    assert comparison.passed, json.dumps(comparison.to_dict())[:2000]
    # Every layer, the rescaled Q FC's included, is judged against what it computes: the
    # folds' new values against the model as rewritten, the others against the model itself.
    rows = [r for r in comparison.rows if r.kind == "layer"]
    assert rows and all(r.passed for r in rows), [r.note for r in rows if not r.passed]
    assert any(r.tensor.endswith("_scaled") for r in rows)


def test_folded_layer_norm_op_is_compared_as_the_normalised_value(tmp_path):
    b = Builder(opset=17)
    y = _layer_norm(b, b.input("x", [1, TOKENS, CHANNELS]), "op")
    model = b.model([_fc(b, y, "fc", True, fout=32)[0]])
    result = mrvl_convert.convert(model, tmp_path / "art")
    feeds = {"x": np.random.default_rng(0).standard_normal((1, TOKENS, CHANNELS)).astype(
        np.float32)}
    comparison = mrvl_convert.compare(model, result.out_dir, feeds, layers=True)
    rows = [r for r in comparison.rows if r.kind == "layer"]
    assert any(r.tensor.endswith("_normalized") for r in rows)
    assert all(r.passed for r in rows), [(r.tensor, r.max_abs) for r in rows]


def test_scalar_scale_and_shift_of_a_0d_tensor_is_left_alone():
    # plcmos_v2: a 0-D x * c + d (no channel axis) raised IndexError in the affine fold
    b = Builder()
    x = b.input("x", [])
    y = b.op("Add", [b.op("Mul", [x, b.const(np.float32(1.5))]), b.const(np.float32(0.25))])
    model = b.model([b.op("Mul", [y, y])])
    _untouched(model)
    feeds = {"x": np.array(0.75, np.float32)}
    canonical, proto = canonicalized(model)
    [after], [before] = run_ort(proto, feeds).values(), run_ort(model, feeds).values()
    np.testing.assert_array_equal(after, before)
