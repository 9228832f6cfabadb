"""The fp16 rounding used between layers gives exactly numpy's float16 cast values, by both of
its paths: onnxruntime's Cast for large arrays (bit for bit) and the numpy form for small ones
(bit for bit except that zero results are +0.0)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrvl_convert.kernels import fp16
from mrvl_convert.kernels.fp16 import FP16_MAX, is_fp16_valued, round_to_fp16
from mrvl_convert.kernels.ufuncs import CHUNK, RowAdd, maximum_inplace

PATHS = ("numpy", "onnxruntime")


def cast_round(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)


def assert_bit_identical(x: np.ndarray, path: str) -> None:
    original = x.copy()
    got, in_range = round_to_fp16(x, method=path)
    want = cast_round(x)
    np.testing.assert_array_equal(x, original)  # not in place unless asked
    assert in_range == bool(np.isfinite(want).all())
    # onnxruntime keeps the sign of a zero result; the numpy form makes every zero +0.0.
    same_bits = np.ones(want.shape, bool) if path == "onnxruntime" else want != 0
    np.testing.assert_array_equal(got.view(np.uint32)[same_bits], want.view(np.uint32)[same_bits])
    assert np.all(got[~same_bits] == 0)


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="method must be one of"):
        round_to_fp16(np.ones(3, np.float32), method="fast")


@pytest.mark.parametrize("path", PATHS)
def test_random_bit_patterns_in_range(path):
    bits = np.random.default_rng(0).integers(0, 2 ** 32, 2_000_000, dtype=np.uint64)
    x = bits.astype(np.uint32).view(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) < 65520.0)]
    assert_bit_identical(x, path)


@pytest.mark.parametrize("path", PATHS)
def test_boundaries_ties_subnormals_and_signed_zero(path):
    halfway = (np.arange(1, 2048, dtype=np.float32) + 0.5) * np.float32(2.0 ** -24)  # ties
    special = np.array([0.0, -0.0, 2.0 ** -25, -2.0 ** -25, 2.0 ** -26, 2.0 ** -14,
                        2.0 ** -14 * (1 - 2.0 ** -12), 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
                        FP16_MAX, 65519.99, -65519.99, 1e-30, -1e-30], dtype=np.float32)
    assert_bit_identical(np.concatenate([special, halfway, -halfway]), path)


@pytest.mark.parametrize("path", PATHS)
def test_overflow_and_nan_are_reported(path):
    for bad in (65520.0, -70000.0, np.inf, np.nan):
        x = np.array([1.0, bad], dtype=np.float32)
        got, in_range = round_to_fp16(x, method=path)
        assert not in_range
        np.testing.assert_array_equal(got, cast_round(x))
    # Both infinities together: their sum is NaN, still out of range.
    assert not round_to_fp16(np.array([70000.0, -70000.0], np.float32), method=path)[1]


def test_auto_method_by_size_reports_a_late_overflow():
    """With method="auto" a large array goes to onnxruntime, a small one to numpy (told apart by
    the sign of a zero result, which only onnxruntime keeps); an overflow in the last element
    of either is reported."""
    for size in (fp16.ORT_MIN_SIZE - 1, fp16.ORT_MIN_SIZE, 3 * fp16.ORT_MIN_SIZE + 5):
        x = np.random.default_rng(size).standard_normal(size).astype(np.float32)
        x[0] = -1e-30
        got, in_range = round_to_fp16(x)
        assert in_range and got[0] == 0
        assert np.signbit(got[0]) == (size >= fp16.ORT_MIN_SIZE)
        x[-1] = -65520.0
        got, in_range = round_to_fp16(x)
        assert not in_range and got[-1] == -np.inf
        np.testing.assert_array_equal(got, cast_round(x))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False,
                          min_value=-65519.98828125, max_value=65519.98828125),
                min_size=1, max_size=50))
def test_property_bit_identical(values):
    x = np.array(values, dtype=np.float32)
    for path in PATHS:
        assert_bit_identical(x, path)
        assert is_fp16_valued(round_to_fp16(x, method=path)[0])


@pytest.mark.parametrize("path", PATHS)
def test_inplace_overwrites_only_when_asked(path):
    x = np.array([1.0001, -3.14159, 70000.0], dtype=np.float32)
    got, ok = round_to_fp16(x, inplace=True, method=path)
    assert got is x and not ok
    np.testing.assert_array_equal(x, cast_round(np.array([1.0001, -3.14159, 70000.0],
                                                         dtype=np.float32)))


@pytest.mark.parametrize("path", PATHS)
def test_non_contiguous_and_empty_inputs(path):
    x = np.random.default_rng(1).standard_normal((6, 8)).astype(np.float32)[:, ::2]
    assert_bit_identical(np.ascontiguousarray(x), path)
    got, _ = round_to_fp16(x, method=path)
    np.testing.assert_array_equal(got, cast_round(x))
    empty, ok = round_to_fp16(np.zeros((0, 3), np.float32), method=path)
    assert ok and empty.shape == (0, 3)


def test_onnxruntime_path_from_several_threads_at_once():
    """One cached onnxruntime session serves every call: overlapping calls (as the simulator
    makes from several threads) each get their own array's rounding."""
    rng = np.random.default_rng(7)
    arrays = [(rng.standard_normal((4, 300, 100)) * 10 ** k).astype(np.float32)
              for k in range(-3, 5)]
    want = [cast_round(a) for a in arrays]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda a: round_to_fp16(a, method="onnxruntime"), arrays * 4))
    for (rounded, in_range), ref in zip(got, want * 4):
        assert in_range == bool(np.isfinite(ref).all())
        np.testing.assert_array_equal(rounded, ref)


@settings(max_examples=60, deadline=None)
@given(size=st.one_of(st.integers(0, 3000), st.integers(CHUNK - 3, 2 * CHUNK + 3)),
       value=st.sampled_from([0.0, 2.0 ** -14, -1.5]), strided=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_maximum_inplace_is_np_maximum(size, value, strided, seed):
    """The chunked fast path (and its last partial chunk, small and non-contiguous fallbacks)
    changes nothing: same values, NaN propagated, written in place."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(2 * size).astype(np.float32)
    base[rng.random(base.size) < 0.01] = np.nan
    y = base[::2] if strided else base[:size]
    want = np.maximum(y, np.float32(value))
    got = maximum_inplace(y, value)
    assert got is y
    np.testing.assert_array_equal(y, want)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 300), width=st.sampled_from([1, 3, 64, 1000, CHUNK + 1]),
       strided=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_row_add_is_broadcast_add(rows, width, strided, seed):
    """RowAdd (a bias tiled to chunk length) equals numpy's broadcast add, in place, whether a
    chunk holds many rows, one row, or the row is longer than a chunk."""
    rng = np.random.default_rng(seed)
    rows = min(rows, 3) if width > CHUNK else rows
    row = rng.standard_normal(width).astype(np.float32)
    base = rng.standard_normal((rows, 2 * width)).astype(np.float32)
    base[rng.random(base.shape) < 0.01] = np.nan
    y = base[:, ::2] if strided else np.ascontiguousarray(base[:, :width])
    want = y + row
    got = RowAdd(row)(y)
    assert got is y
    np.testing.assert_array_equal(y, want)
