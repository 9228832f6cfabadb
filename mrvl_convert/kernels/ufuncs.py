"""Fast forms of the few numpy calls that the simulator makes on every layer output.

numpy runs a binary ufunc at full SIMD speed only when both operands are contiguous arrays of the
same length; against a scalar or a broadcast row it is several times slower (docs/BENCHMARKS.md).
ReLU, the bias add and the fp16 rounding touch every element of every layer output, so they go
through the helpers here,
which walk a C-contiguous array in chunks of ``CHUNK`` elements (256 KiB of float32: the chunk
and its operand stay in the L2 cache) against a same-length constant operand built once. Results
are identical to the plain numpy calls, NaN propagation included
(tests/kernels/test_fp16.py).
"""
from __future__ import annotations

from functools import cache
from typing import Iterator

import numpy as np

#: Elements per chunk of the elementwise passes.
CHUNK = 65536
# Below this size the per-chunk call overhead outweighs the faster loop.
_SMALL = 1024


@cache
def filled(value: float, dtype: str) -> np.ndarray:
    """A read-only array of CHUNK copies of ``value``: the same-length operand for one chunk."""
    array = np.full(CHUNK, value, dtype=dtype)
    array.flags.writeable = False
    return array


def chunks(flat: np.ndarray, size: int = CHUNK) -> Iterator[np.ndarray]:
    """Consecutive writable views of ``size`` elements (the last may be shorter) of a 1-D array."""
    for start in range(0, flat.size, size):
        yield flat[start:start + size]


def maximum_inplace(y: np.ndarray, value: float) -> np.ndarray:
    """``np.maximum(y, value, out=y)``, faster for large C-contiguous arrays; returns y."""
    if not y.flags.c_contiguous or y.size < _SMALL:
        return np.maximum(y, y.dtype.type(value), out=y)
    const = filled(float(value), y.dtype.str)
    for part in chunks(y.reshape(-1)):
        np.maximum(part, const[:part.size], out=part)
    return y


def relu_inplace(y: np.ndarray) -> np.ndarray:
    return maximum_inplace(y, 0.0)


class RowAdd:
    """``y += row`` in place for a C-contiguous ``y`` whose last axis has ``len(row)`` values
    (a bias added to ``[M, O]``), against the row tiled once to about CHUNK elements."""

    def __init__(self, row: np.ndarray) -> None:
        self.row = np.ascontiguousarray(row).reshape(-1)
        reps = max(1, CHUNK // max(1, self.row.size))
        self.tiled = np.tile(self.row, reps)
        self.tiled.flags.writeable = False

    def __call__(self, y: np.ndarray) -> np.ndarray:
        if not y.flags.c_contiguous or y.size < _SMALL or y.shape[-1] != self.row.size:
            y += self.row
            return y
        # The tiled row is a whole number of rows, so every chunk starts at a row boundary.
        for part in chunks(y.reshape(-1), self.tiled.size):
            np.add(part, self.tiled[:part.size], out=part)
        return y


def activate_inplace(y: np.ndarray, activation) -> np.ndarray:
    """Apply a fused ``layers.Activation`` (or None) to a float32 array in place; returns y.

    Computed in float32 on the fp16-valued sum, before the layer's output is rounded to fp16.
    """
    if activation is None:
        return y
    name = activation.value
    if name == "relu":
        return relu_inplace(y)
    if name == "tanh":
        return np.tanh(y, out=y)
    if name == "sigmoid":
        # 1 / (1 + exp(-y)); exp overflows to inf for y < -88, giving exactly 0 as it should.
        np.negative(y, out=y)
        np.exp(y, out=y)
        y += np.float32(1.0)
        return np.reciprocal(y, out=y)
    raise ValueError(f"unknown activation {name!r}")
