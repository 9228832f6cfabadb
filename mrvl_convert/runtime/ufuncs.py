"""Fast forms of the few numpy calls that the simulator makes on every layer output.

numpy (checked on 2.4) vectorises ``np.maximum`` only when both operands are arrays: against a
Python or numpy scalar it runs about 3x slower than against a broadcast row of the same value.
ReLU and the fp16 rounding both clamp every element of every layer output, so they go through
``maximum_inplace``, which is ``np.maximum(y, value, out=y)`` with the bulk of ``y`` seen as
rows of ``_ROW`` elements. Results are identical, including NaN propagation.
"""
from __future__ import annotations

from functools import cache

import numpy as np

_ROW = 1024


@cache
def _row(value: float, dtype: str) -> np.ndarray:
    row = np.full(_ROW, value, dtype=dtype)
    row.flags.writeable = False
    return row


def maximum_inplace(y: np.ndarray, value: float) -> np.ndarray:
    """``np.maximum(y, value, out=y)``, faster for large C-contiguous arrays; returns y."""
    if not y.flags.c_contiguous or y.size < _ROW:
        return np.maximum(y, y.dtype.type(value), out=y)
    flat = y.reshape(-1)
    bulk = flat.size - flat.size % _ROW
    rows = flat[:bulk].reshape(-1, _ROW)
    np.maximum(rows, _row(float(value), y.dtype.str), out=rows)
    if bulk < flat.size:
        np.maximum(flat[bulk:], y.dtype.type(value), out=flat[bulk:])
    return y


def relu_inplace(y: np.ndarray) -> np.ndarray:
    return maximum_inplace(y, 0.0)
