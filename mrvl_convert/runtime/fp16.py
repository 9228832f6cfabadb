"""The simulator's float16 number model, in one place.

The accelerator runs the RFC's fp16 mode. We model it as:

* inputs and weights are rounded to float16;
* products are accumulated in float32 (numpy float32 arithmetic, BLAS sgemm);
* every layer's output is rounded to float16 (overflow past 65504 becomes inf);
* subgraph outputs are handed back as float32.

Storage choice, stated explicitly: between layers an activation is a **float32 array whose every
value is exactly a float16 value** ("fp16-valued float32"). This is the same set of numbers as a
``np.float16`` array, but the math kernels need float32 anyway and numpy's float32<->float16
casts are scalar loops (about 2 ns per element each way, which would cost a ResNet-50 more than
its convolutions). ``round_to_fp16`` does the rounding in float32 with a handful of vectorised
operations and is bit-identical to ``x.astype(np.float16).astype(np.float32)`` (checked over all
finite float32 values below the overflow threshold, and by the test suite on samples).
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

#: Storage dtype of activations between layers (values restricted to the float16 grid).
ACTIVATION_DTYPE = np.float32
#: Largest finite float16 value.
FP16_MAX = 65504.0
#: Smallest magnitude that rounds to float16 infinity (half-way between 65504 and 2**16).
FP16_OVERFLOW = 65520.0

_EXP_MASK = np.uint32(0x7F800000)
_SIGN_MASK = np.uint32(0x80000000)
# Exponent bits of 2**-14, the smallest float16 normal: below it float16 has a fixed step 2**-24.
_MIN_NORMAL_EXP = np.uint32(0x38800000)
# Adding c = 1.5 * 2**(e + 13) to x with exponent e makes the float32 sum's last bit weigh
# 2**(e - 10), which is exactly float16's step at exponent e, so the hardware's
# round-to-nearest-even of (x + c) is float16's rounding of x; subtracting c is exact.
_MAGIC_OFFSET = np.uint32((13 << 23) | 0x400000)


def round_to_fp16(y: np.ndarray) -> Tuple[np.ndarray, bool]:
    """Round a float32 array to the float16 grid; return (rounded float32 array, in_range).

    ``in_range`` is False when some value overflowed to +-inf or is NaN; the returned array then
    holds those infs/NaNs, exactly as a float16 cast would.
    """
    y = np.asarray(y, dtype=np.float32)
    if y.size == 0:
        return y.copy(), True
    lo, hi = y.min(), y.max()  # NaN propagates through min/max, so it fails the test below
    if not (lo > -FP16_OVERFLOW and hi < FP16_OVERFLOW):
        return y.astype(np.float16).astype(np.float32), False
    if not y.flags.c_contiguous:
        y = np.ascontiguousarray(y)
    bits = y.view(np.uint32)
    magic = bits & _EXP_MASK
    np.maximum(magic, _MIN_NORMAL_EXP, out=magic)
    magic += _MAGIC_OFFSET
    magic_f = magic.view(np.float32)
    out = y + magic_f
    out -= magic_f
    # (x + c) - c loses the sign of results that round to zero; put the sign bit back.
    np.bitwise_and(bits, _SIGN_MASK, out=magic)
    out.view(np.uint32)[...] |= magic
    return out, True


def const_to_fp16(values: np.ndarray) -> Tuple[np.ndarray, bool]:
    """Round a constant (weights, bias) once at compile time; same contract as round_to_fp16."""
    return round_to_fp16(np.ascontiguousarray(values, dtype=np.float32))


def is_fp16_valued(y: np.ndarray) -> bool:
    """True if every value of y is exactly representable in float16 (used by tests)."""
    y = np.asarray(y, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        back = y.astype(np.float16).astype(np.float32)
    return bool(np.array_equal(back, y, equal_nan=True))
