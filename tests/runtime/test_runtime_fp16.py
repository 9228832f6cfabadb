"""The fp16 rounding used between layers gives exactly numpy's float16 cast values (bit for bit
except that zero results are +0.0)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mrvl_convert.runtime.fp16 import FP16_MAX, is_fp16_valued, round_to_fp16
from mrvl_convert.runtime.ufuncs import CHUNK, RowAdd, maximum_inplace


def cast_round(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)


def assert_bit_identical(x: np.ndarray) -> None:
    original = x.copy()
    got, in_range = round_to_fp16(x)
    want = cast_round(x)
    np.testing.assert_array_equal(x, original)  # not in place unless asked
    assert in_range == bool(np.isfinite(want).all())
    nonzero = want != 0
    np.testing.assert_array_equal(got.view(np.uint32)[nonzero], want.view(np.uint32)[nonzero])
    assert np.all(got[~nonzero] == 0)


def test_random_bit_patterns_in_range():
    bits = np.random.default_rng(0).integers(0, 2 ** 32, 2_000_000, dtype=np.uint64)
    x = bits.astype(np.uint32).view(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) < 65520.0)]
    assert_bit_identical(x)


def test_boundaries_ties_subnormals_and_signed_zero():
    halfway = (np.arange(1, 2048, dtype=np.float32) + 0.5) * np.float32(2.0 ** -24)  # ties
    special = np.array([0.0, -0.0, 2.0 ** -25, -2.0 ** -25, 2.0 ** -26, 2.0 ** -14,
                        2.0 ** -14 * (1 - 2.0 ** -12), 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
                        FP16_MAX, 65519.99, -65519.99, 1e-30, -1e-30], dtype=np.float32)
    assert_bit_identical(np.concatenate([special, halfway, -halfway]))


def test_overflow_and_nan_are_reported():
    for bad in (65520.0, -70000.0, np.inf, np.nan):
        x = np.array([1.0, bad], dtype=np.float32)
        got, in_range = round_to_fp16(x)
        assert not in_range
        np.testing.assert_array_equal(got, cast_round(x))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False,
                          min_value=-65519.98828125, max_value=65519.98828125),
                min_size=1, max_size=50))
def test_property_bit_identical(values):
    x = np.array(values, dtype=np.float32)
    assert_bit_identical(x)
    assert is_fp16_valued(round_to_fp16(x)[0])


def test_inplace_overwrites_only_when_asked():
    x = np.array([1.0001, -3.14159, 70000.0], dtype=np.float32)
    got, ok = round_to_fp16(x, inplace=True)
    assert got is x and not ok
    np.testing.assert_array_equal(x, cast_round(np.array([1.0001, -3.14159, 70000.0],
                                                         dtype=np.float32)))


def test_non_contiguous_and_empty_inputs():
    x = np.random.default_rng(1).standard_normal((6, 8)).astype(np.float32)[:, ::2]
    assert_bit_identical(np.ascontiguousarray(x))
    got, _ = round_to_fp16(x)
    np.testing.assert_array_equal(got, cast_round(x))
    empty, ok = round_to_fp16(np.zeros((0, 3), np.float32))
    assert ok and empty.shape == (0, 3)


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
