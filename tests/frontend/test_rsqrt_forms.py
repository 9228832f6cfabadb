"""Norms' x / sqrt(v) and powers (frontend/rsqrt_forms.py): each rewrite on onnxruntime before
and after, bit-equal where the module says exact, else within its stated relative bound (2**-22,
and for the Pows 2**-20 where onnxruntime's Sqrt is Eigen's fast psqrt);
the forms mrvl.sqrt_div takes, and other powers, are left alone. The special values in which
Pow(v, +-0.5) and its rewrite differ depend on onnxruntime's Sqrt kernel (the module's two lists:
Eigen's fast psqrt, as in 1.18, or a correctly rounded one, as in 1.32); the test asks the
installed onnxruntime which kernel it has and checks that list exactly."""
from __future__ import annotations

import numpy as np
import pytest

from mrvl_convert.frontend.rsqrt_forms import DIV_BOUND, POW_BOUND, POW_BOUND_ROUNDED
from support.models import Builder, canonicalized, ort_sqrt_is_fast, run_ort


# Indices of test_zeros_infinities_and_nans_differ_only_where_the_module_says's inputs
# [+0, -0, +inf, -inf, -2, NaN, 1e-45, 4] at which the module says Pow(., +-0.5) and its rewrite
# differ: -0 and -inf with a correctly rounded Sqrt; +inf, -inf and the subnormal with the fast one.
POW_EXCEPTIONS = {False: [1, 3], True: [2, 3, 6]}


def _scalar(b: Builder, value: float) -> str:
    return b.const(np.array(value, np.float32))


def _model(form: str, shape=(1, 6, 16)):
    b = Builder(opset=13)
    x = b.input("x", list(shape))
    if form == "pow2":
        y = b.op("Pow", [x, _scalar(b, 2.0)], name="form")
    elif form in ("pow_half", "pow_neg_half"):
        y = b.op("Pow", [x, _scalar(b, 0.5 if form == "pow_half" else -0.5)], name="form")
    elif form in ("div_one", "div_const"):
        s = b.op("Sqrt", [x], name="sqrt")
        y = b.op("Div", [_scalar(b, 1.0 if form == "div_one" else -3.7), s], name="form")
    else:  # div_small: a [1, T, 1] dividend broadcast into the Sqrt's [1, T, C]
        small = b.op("ReduceMean", [x], name="mean", axes=[-1], keepdims=1)
        y = b.op("Div", [small, b.op("Sqrt", [x], name="sqrt")], name="form")
    return b.model([y])


def _feed(shape=(1, 6, 16), seed: int = 0) -> np.ndarray:
    """Positive values over sixty binades, and the zero and infinity the bound covers."""
    rng = np.random.default_rng(seed)
    x = rng.random(shape) * 10.0 ** rng.integers(-30, 30, shape)
    x.reshape(-1)[:2] = [0.0, np.inf]
    return x.astype(np.float32)


@pytest.mark.parametrize("form,exact,became", [
    ("pow2", True, "Mul"), ("div_one", True, "Reciprocal"), ("pow_half", False, "Sqrt"),
    ("pow_neg_half", False, "Reciprocal"), ("div_const", False, "Mul"),
    ("div_small", False, "Mul")])
def test_each_rewrite_keeps_onnxruntime_result_within_its_bound(form, exact, became):
    model = _model(form)
    canonical, proto = canonicalized(model)
    node = next(n for n in canonical.graph.nodes if n.name == "form")
    assert node.op == became and "form" in canonical.rewritten
    assert not {"Pow", "Div"} & {n.op for n in canonical.graph.nodes}
    x = _feed()
    [want] = run_ort(model, {"x": x}, optimize=False).values()
    [got] = run_ort(proto, {"x": x}, optimize=False).values()
    if exact:
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        return
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    finite = np.isfinite(want) & (want != 0)
    # zeros and infinities agree, but for the module's stated exception: with onnxruntime's fast
    # Sqrt (1.18) Pow(+inf, +-0.5) is inf or 0 where the rewrite gives NaN
    stated = (x == np.inf) & form.startswith("pow_") & ort_sqrt_is_fast()
    assert np.all(same | finite | stated)
    rel = np.abs(got[finite].astype(np.float64) - want[finite]) / np.abs(want[finite])
    if form.startswith("pow_"):
        bound = POW_BOUND if ort_sqrt_is_fast() else POW_BOUND_ROUNDED
    else:
        bound = DIV_BOUND
    assert rel.max() <= bound


def test_a_division_mrvl_sqrt_div_takes_stays_a_division():
    """Div(d, Sqrt(v)) with d of the quotient's shape keeps its one rounding on a CPU path."""
    b = Builder(opset=13)
    x = b.input("x", [1, 6, 16])
    v = b.op("ReduceMean", [b.op("Mul", [x, x])], axes=[-1], keepdims=1)
    model = b.model([b.op("Div", [x, b.op("Sqrt", [v], name="sqrt")], name="form")])
    canonical, _ = canonicalized(model)
    assert next(n for n in canonical.graph.nodes if n.name == "form").op == "Div"
    assert "form" not in canonical.rewritten


@pytest.mark.parametrize("exponent", [3.0, -1.0, 1.5])
def test_other_powers_are_left_alone(exponent):
    b = Builder(opset=13)
    x = b.input("x", [1, 6, 16])
    model = b.model([b.op("Pow", [x, _scalar(b, exponent)], name="form")])
    canonical, _ = canonicalized(model)
    assert [n.op for n in canonical.graph.nodes] == ["Pow"]


def test_the_t5_norm_loses_its_division():
    """T5's x * Div(1, Sqrt(mean(Pow(x, 2)) + eps)): Reciprocal(Sqrt) (mrvl.rsqrt) and a Mul
    whose [1, T, 1] operand broadcasts into x (mrvl.mul), bit-equal to the original."""
    b = Builder(opset=13)
    x = b.input("x", [1, 6, 16])
    v = b.op("Add", [b.op("ReduceMean", [b.op("Pow", [x, _scalar(b, 2.0)], name="square")],
                          axes=[-1], keepdims=1), _scalar(b, 1e-6)])
    r = b.op("Div", [_scalar(b, 1.0), b.op("Sqrt", [v], name="sqrt")], name="inverse")
    model = b.model([b.op("Mul", [x, r], name="normed")])
    canonical, proto = canonicalized(model)
    assert [n.op for n in canonical.graph.nodes] == [
        "Mul", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Mul"]
    x_value = (np.random.default_rng(1).standard_normal((1, 6, 16)) * 30).astype(np.float32)
    [want] = run_ort(model, {"x": x_value}, optimize=False).values()
    [got] = run_ort(proto, {"x": x_value}, optimize=False).values()
    assert np.array_equal(got, want)


@pytest.mark.parametrize("form", ["pow_half", "pow_neg_half", "div_one", "div_const"])
def test_zeros_infinities_and_nans_differ_only_where_the_module_says(form):
    """-0 and -inf under Pow(., +-0.5) are the stated exceptions (+inf, -inf and a subnormal with
    onnxruntime 1.18's fast Sqrt); every other special value (+0, +inf, a negative, NaN, a
    subnormal) comes out the same, sign of zero included."""
    special = np.array([0.0, -0.0, np.inf, -np.inf, -2.0, np.nan, 1e-45, 4.0], np.float32)
    model = _model(form, shape=(1, 1, 8))
    _, proto = canonicalized(model)
    [want] = run_ort(model, {"x": special.reshape(1, 1, 8)}, optimize=False).values()
    [got] = run_ort(proto, {"x": special.reshape(1, 1, 8)}, optimize=False).values()
    want, got = want.ravel(), got.ravel()
    same = (want.view(np.uint32) == got.view(np.uint32)) | (np.isnan(want) & np.isnan(got))
    stated = POW_EXCEPTIONS[ort_sqrt_is_fast()] if form.startswith("pow_") else []
    assert sorted(np.flatnonzero(~same)) == stated
