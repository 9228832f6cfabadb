"""A Div of two activations runs on the accelerator as Power(b, -1) then Mul2D(a, r)
(``layers/_div_pairs.py``, rule ``mrvl.div_pair``), within its stated bound of onnxruntime's
quotient; before, it was refused ("only a division of an activation by a constant maps") and a
masked mean pooling (``ReduceSum(x * mask) / Clip(ReduceSum(mask), min)``, the way sentence
encoders end) cut its model in three stages."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from mrvl_convert.runtime.simulator import Fp16RangeWarning
from support.layer_chains import layer_kinds
from support.models import Builder, run_ort
from support.onnxref import fp16_round

#: the module's bound: two fp16 roundings (2u + u**2, u = 2**-11) and the float32 steps of the
#: simulator and of onnxruntime's own quotient (each 2**-24)
RTOL = 2.0 ** -10 + 2.0 ** -20
ATOL = 2.0 ** -25


def within_bound(got: np.ndarray, want: np.ndarray) -> None:
    """Finite quotients within the bound; inf and NaN where and as the model has them."""
    finite = np.isfinite(want)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    err = np.abs(got[finite] - want[finite])
    limit = RTOL * np.abs(want[finite]) + ATOL
    assert np.all(err <= limit), float(np.max(err / (np.abs(want[finite]) + ATOL)))


def _pool_model():
    """x [1, 24, 16] -> MatMul -> masked mean pooling over the 24 tokens -> Gemm; the pooled
    vector is an output too. Integer inputs and weights of -1, 0 and 1 keep everything before
    the Div exact in fp16, so the difference is the Div's."""
    b = Builder()
    x, mask = b.input("x", [1, 24, 16]), b.input("mask", [1, 24, 1])
    w = b.const(b.rng.integers(-1, 2, (16, 32)).astype(np.float32))
    h = b.op("MatMul", [x, w])
    tokens = b.const(np.array([1], np.int64))
    summed = b.op("ReduceSum", [b.op("Mul", [h, mask]), tokens], keepdims=0)
    count = b.op("Clip", [b.op("ReduceSum", [mask, tokens], keepdims=0),
                          b.const(np.array(1.0, np.float32))])   # as romanizer_encoder
    pooled = b.op("Div", [summed, count], name="pool_div")
    return b.model([pooled, b.gemm(pooled, 32, 4)])


def test_masked_mean_pooling_is_one_stage_within_the_bound(tmp_path):
    model = _pool_model()
    rng = np.random.default_rng(5)
    feed = {"x": rng.integers(-8, 9, (1, 24, 16)).astype(np.float32),
            "mask": (np.arange(24) < 7).astype(np.float32).reshape(1, 24, 1)}  # 7: inexact 1/7
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    kinds = layer_kinds(result)
    assert "Power" in kinds and "Mul2D" in kinds, kinds
    got = HybridSession(result.out_dir, threads=1).run(None, feed)
    want = run_ort(model, feed)
    name = model.graph.output[0].name
    within_bound(got[0], want[name])
    assert not np.array_equal(got[0], want[name])   # 1/7 rounds: the test sees the layer's value


@pytest.mark.parametrize("divisor", [[1, 8, 6], [1, 8, 1], [1, 1, 6]])
def test_div_of_two_activations_within_the_bound_and_inf_at_zero(tmp_path, divisor):
    b = Builder()
    a, d = b.input("a", [1, 8, 6]), b.input("d", divisor)
    a = b.op("MatMul", [a, b.const(np.eye(6, dtype=np.float32))])   # exact: an FC for the stage
    model = b.model([b.op("Div", [a, d], name="pair_div")])
    rng = np.random.default_rng(len(divisor) + sum(divisor))
    num = fp16_round(rng.uniform(1, 4, (1, 8, 6)) * rng.choice([-1.0, 1.0], (1, 8, 6))
                     * np.exp2(rng.uniform(-6, 6, (1, 8, 6))))
    # divisors of 2**-6 to 2**6 in magnitude: every quotient stays in fp16's normal range
    den = fp16_round(rng.choice([-1.0, 1.0], divisor) * np.exp2(rng.uniform(-6, 6, divisor)))
    feed = {"a": num, "d": den}
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    [got] = HybridSession(result.out_dir, threads=1).run(None, feed)
    within_bound(got, run_ort(model, feed)["pair_div_out"])
    # a / 0 is +-inf by a's sign (NaN for 0 / 0), as in the model; the reciprocal's inf is an
    # fp16 range event, so the simulator reports it (a warning under on_range_error="warn").
    # Not -0: the simulator's fp16 rounding holds every zero as +0 (kernels/fp16.py).
    den.reshape(-1)[:2] = 0.0
    num.reshape(-1)[0] = 0.0
    session = HybridSession(result.out_dir, threads=1, on_range_error="warn")
    with pytest.warns(Fp16RangeWarning):
        [got] = session.run(None, feed)
    want = run_ort(model, feed)["pair_div_out"]
    assert np.isinf(want).any() and np.isnan(want).any()
    within_bound(got, want)

def test_a_constant_dividend_is_still_refused(tmp_path):
    """Mul2D's first input is an activation of the output's shape: 1 / x is not this form."""
    b = Builder()
    x = b.input("x", [1, 4, 6])
    model = b.model([b.op("Div", [b.const(np.ones((1, 4, 6), np.float32)), x])])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert all(s["kind"] != "mrvl" for s in result.manifest["stages"])
