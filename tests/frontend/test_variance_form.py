"""The E[x^2] - E[x]^2 variance (frontend/variance_form.py): rewritten to E[(x - E[x])^2]
within its stated float32 bound of the original on onnxruntime, closer to the exact variance,
and left alone where it is not the form."""
from __future__ import annotations

import numpy as np
import pytest

from support.models import Builder, canonicalized, run_ort

T, C = 6, 48
U = 2.0 ** -24


def _model(square: str = "mul", axes_other=None, opset: int = 13):
    b = Builder(opset=opset)
    x = b.input("x", [1, T, C])
    mean = b.op("ReduceMean", [x], name="mean", axes=[-1], keepdims=1)
    sq = (b.op("Mul", [x, x], name="square") if square == "mul"
          else b.op("Pow", [x, b.const(np.array(2.0, np.float32))], name="square"))
    square_mean = b.op("ReduceMean", [sq], name="square_mean",
                       axes=axes_other or [-1], keepdims=1)
    mm = (b.op("Mul", [mean, mean], name="mean_square") if square == "mul"
          else b.op("Pow", [mean, b.const(np.array(2.0, np.float32))], name="mean_square"))
    return b.model([b.op("Sub", [square_mean, mm], name="var")])


def _x(offset: float, seed: int = 0) -> np.ndarray:
    """Tokens whose mean is ``offset`` and spread about 1: E[x^2] - E[x]^2 cancels."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, T, C)) + offset).astype(np.float32)


@pytest.mark.parametrize("square", ["mul", "pow"])
@pytest.mark.parametrize("offset", [0.0, 30.0, 300.0])
def test_rewrite_is_within_its_float32_bound_and_closer_to_the_exact_variance(square, offset):
    model = _model(square)
    canonical, rewritten = canonicalized(model)
    assert "became E[(x - E[x])^2]" in canonical.rewritten["var"]
    assert {"square_mean", "square", "mean_square"} <= set(canonical.merged)
    assert [n.op for n in canonical.graph.nodes].count("ReduceMean") == 2
    x = _x(offset)
    [original] = run_ort(model, {"x": x}).values()
    [ours] = run_ort(rewritten, {"x": x}).values()
    x64 = x.astype(np.float64)
    exact = x64.var(axis=-1, keepdims=True)
    bound = (4 * C + 11) * U * (x64 ** 2).mean(axis=-1, keepdims=True)
    assert np.all(np.abs(original - ours) <= bound)
    assert np.all(np.abs(ours - exact) <= np.abs(original - exact) + (C + 4) * U * exact)
    assert np.all(ours >= 0)


def test_fp16_cancels_the_original_but_not_the_rewritten_form():
    """The reason for the rewrite: each form with every op rounded to float16, as the
    accelerator's layers do (numpy, one rounding per op), on tokens of mean 30 and spread 1."""
    x = _x(30.0).astype(np.float16).astype(np.float64)
    half = lambda v: np.asarray(v).astype(np.float16).astype(np.float64)  # noqa: E731
    mean = half(x.mean(axis=-1, keepdims=True))
    original = half(half(half(x * x).mean(axis=-1, keepdims=True)) - half(mean * mean))
    d = half(x - mean)
    ours = half(half(d * d).mean(axis=-1, keepdims=True))
    exact = x.var(axis=-1, keepdims=True)
    assert np.max(np.abs(original - exact) / exact) > 0.2
    assert np.max(np.abs(ours - exact) / exact) < 0.01


def test_model_own_centred_tensor_is_reused():
    b = Builder(opset=13)
    x = b.input("x", [1, T, C])
    mean = b.op("ReduceMean", [x], name="mean", axes=[-1], keepdims=1)
    centred = b.op("Sub", [x, mean], name="centre")
    var = b.op("Sub", [b.op("ReduceMean", [b.op("Mul", [x, x], name="square")],
                            name="square_mean", axes=[-1], keepdims=1),
                       b.op("Mul", [mean, mean], name="mean_square")], name="var")
    model = b.model([b.op("Div", [centred, b.op("Sqrt", [var], name="std")], name="normed")])
    canonical, rewritten = canonicalized(model)
    assert [n.op for n in canonical.graph.nodes].count("Sub") == 1
    x_value = _x(3.0)
    [want] = run_ort(model, {"x": x_value}).values()
    [got] = run_ort(rewritten, {"x": x_value}).values()
    # The variance moves by at most its bound; d / sqrt(var) by half as much relatively, plus
    # a few roundings of the Sqrt and Div.
    x64 = x_value.astype(np.float64)
    relative = (4 * C + 11) * U * (x64 ** 2).mean(-1, keepdims=True) / x64.var(-1, keepdims=True)
    assert np.all(np.abs(got - want) <= (relative / 2 + 4 * U) * np.abs(want))


def test_means_over_other_axes_are_not_the_form():
    canonical, _ = canonicalized(_model(axes_other=[1]))
    assert "var" not in canonical.rewritten
    assert "Sub" in {n.op for n in canonical.graph.nodes}
