"""Sliding windows over NHWC arrays, shared by the convolution and pooling kernels."""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided


def pad_nhwc(x: np.ndarray, pads: Tuple[int, int, int, int], value: float = 0.0) -> np.ndarray:
    """Pad H and W of an NHWC array with ``value``; pads are [top, left, bottom, right]."""
    top, left, bottom, right = pads
    if not (top or left or bottom or right):
        return np.ascontiguousarray(x)
    n, h, w, c = x.shape
    out = np.full((n, h + top + bottom, w + left + right, c), value, dtype=x.dtype)
    out[:, top:top + h, left:left + w, :] = x
    return out


def window_view(xp: np.ndarray, out_hw: Tuple[int, int], kernel: Tuple[int, int],
                strides: Tuple[int, int], dilation: Tuple[int, int]) -> np.ndarray:
    """A read-only [N, OH, OW, KH, KW, C] view of the sliding windows of a padded NHWC array."""
    n, _, _, c = xp.shape
    s0, s1, s2, s3 = xp.strides
    shape = (n, out_hw[0], out_hw[1], kernel[0], kernel[1], c)
    strides_ = (s0, s1 * strides[0], s2 * strides[1], s1 * dilation[0], s2 * dilation[1], s3)
    return as_strided(xp, shape=shape, strides=strides_, writeable=False)


def conv_out_size(size: int, pad: int, kernel: int, stride: int, dilation: int) -> int:
    return (size + pad - dilation * (kernel - 1) - 1) // stride + 1


def tap(offset: int, out: int, stride: int) -> slice:
    """The input positions one kernel tap at ``offset`` reads for ``out`` strided outputs."""
    return slice(offset, offset + (out - 1) * stride + 1, stride)


def taps(xp: np.ndarray, out_hw: Tuple[int, int], kernel: Tuple[int, int],
         strides: Tuple[int, int], dilation: Tuple[int, int]):
    """Yield ``(i, j, view)`` per kernel tap: the [N, OH, OW, C] strided slice it reads."""
    (oh, ow), (sh, sw), (dh, dw) = out_hw, strides, dilation
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            yield i, j, xp[:, tap(i * dh, oh, sh), tap(j * dw, ow, sw), :]


def reads_every_position(size: int, pad_head: int, kernel: int, stride: int, dilation: int,
                         out: int) -> bool:
    """Whether the ``out`` windows along one axis read every one of the ``size`` input
    positions (a stride beyond the window, or a dilation, can skip some)."""
    read = np.zeros(size, dtype=bool)
    for t in range(kernel):
        positions = t * dilation - pad_head + stride * np.arange(out)
        read[positions[(positions >= 0) & (positions < size)]] = True
    return bool(read.all())


def reads_every_pixel(input_hw: Sequence[int], pads: Sequence[int], kernel: Sequence[int],
                      strides: Sequence[int], dilation: Sequence[int],
                      out_hw: Sequence[int]) -> bool:
    """``reads_every_position`` along H and W; pads are [top, left, bottom, right]."""
    return all(reads_every_position(input_hw[axis], pads[axis], kernel[axis], strides[axis],
                                    dilation[axis], out_hw[axis]) for axis in (0, 1))
