"""Pooling layers (NHWC): windowed max / average, and their global forms.

Windows are handled one kernel tap at a time over the whole tensor (KH*KW vectorised numpy
operations), never with a loop over pixels.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from .._pooling import pool_out_size
from .gemm import NUMPY_GEMM, GemmEngine
from .kernel_base import Kernel
from .kernels_conv import pad_nhwc
from .layerspec import LayerSpec


class _Pool2D(Kernel):
    """Shared geometry: pool_size, strides, padding [t, l, b, r], dilation, ceil_mode."""

    pad_value = 0.0

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, h, w, c = spec.input_rank(0, 4)
        # The format states the window twice; two different windows is a broken artifact.
        stated = {key: spec.ints(key, 2) for key in ("pool_size", "kernel_layout_shape")
                  if key in spec.attrs}
        if len(set(stated.values())) > 1:
            layout, size = stated["kernel_layout_shape"], stated["pool_size"]
            raise spec.error("attrs.kernel_layout_shape",
                             f"is {list(layout)} but pool_size is {list(size)}")
        self.kernel_hw = stated.get("pool_size") or spec.ints("kernel_layout_shape", 2)
        self.strides = spec.ints("strides", 2, default=(1, 1))
        pads = spec.ints("padding", 4, default=(0, 0, 0, 0))
        self.dilation = spec.ints("dilation", 2, default=(1, 1))
        ceil_mode = spec.flag("ceil_mode")
        if min(self.kernel_hw + self.strides + self.dilation) < 1 or min(pads) < 0:
            raise spec.error("attrs.pool_size", "pool size, strides and dilation must be >= 1, "
                                                "padding >= 0")
        oh = self._out(h, pads[0], pads[2], 0, ceil_mode)
        ow = self._out(w, pads[1], pads[3], 1, ceil_mode)
        spec.expect_shape((n, oh, ow, c))
        self.out_hw = (oh, ow)
        self.input_hw = (h, w)
        # Ceil mode can make the last window run past the explicit padding: extend the padded
        # input at the bottom/right so every window is in bounds (that extension never counts).
        extra_h = max(0, self._extent(oh, 0) - (h + pads[0] + pads[2]))
        extra_w = max(0, self._extent(ow, 1) - (w + pads[1] + pads[3]))
        self.explicit_pads = pads
        self.pads = (pads[0], pads[1], pads[2] + extra_h, pads[3] + extra_w)

    def _out(self, size: int, head: int, tail: int, axis: int, ceil_mode: bool) -> int:
        return pool_out_size(size, head, tail, self.kernel_hw[axis], self.strides[axis],
                             self.dilation[axis], ceil_mode)

    def _extent(self, out: int, axis: int) -> int:
        return (out - 1) * self.strides[axis] + self.dilation[axis] * (self.kernel_hw[axis] - 1) + 1

    def _valid_taps(self, include_pad: bool) -> np.ndarray:
        """Per output pixel, how many window taps fall on counted positions (the input, plus
        the explicit pads when ``include_pad``; never the ceil-mode extension): [1, OH, OW, 1]."""
        (h, w), (top, left, bottom, right) = self.input_hw, self.explicit_pads
        mask = np.zeros((1, h + self.pads[0] + self.pads[2], w + self.pads[1] + self.pads[3], 1),
                        dtype=np.float32)
        if include_pad:
            mask[:, :top + h + bottom, :left + w + right, :] = 1.0
        else:
            mask[:, top:top + h, left:left + w, :] = 1.0
        count = np.zeros((1,) + self.out_hw + (1,), dtype=np.float32)
        for tap in self._taps(mask):
            count += tap
        return count

    def _taps(self, xp: np.ndarray):
        """Yield, per kernel tap, the [N, OH, OW, C] strided slice of the padded input."""
        (oh, ow), (sh, sw), (dh, dw) = self.out_hw, self.strides, self.dilation
        for i in range(self.kernel_hw[0]):
            for j in range(self.kernel_hw[1]):
                yield xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                         j * dw:j * dw + (ow - 1) * sw + 1:sw, :]

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        if "pool_size" not in attrs and "kernel_layout_shape" not in attrs:
            return "no pool_size"
        return None


class Maxpool2D(_Pool2D):
    """Max over each window; padding is -inf so it never wins.

    The output is a selection of input values, so it is already on the fp16 grid (``exact``)
    unless some window holds padding only (then -inf, which the simulator's range check reports).
    """

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.exact = bool((self._valid_taps(include_pad=False) > 0).all())

    def run(self, x: np.ndarray) -> np.ndarray:
        xp = pad_nhwc(x, self.pads, -np.inf)
        (oh, ow), (sh, sw), (dh, dw) = self.out_hw, self.strides, self.dilation
        # Separable, rows first: an H tap is a slice of whole padded rows (long contiguous runs,
        # numpy's fast case), and the W taps then run on the H-reduced array: KH + KW passes
        # instead of KH * KW. Max is exact in any order.
        rows = np.array(xp[:, 0:(oh - 1) * sh + 1:sh], dtype=np.float32)
        for i in range(1, self.kernel_hw[0]):
            np.maximum(rows, xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh], out=rows)
        out = np.array(rows[:, :, 0:(ow - 1) * sw + 1:sw])
        for j in range(1, self.kernel_hw[1]):
            np.maximum(out, rows[:, :, j * dw:j * dw + (ow - 1) * sw + 1:sw], out=out)
        return out


class Avgpool2D(_Pool2D):
    """Mean over each window; zero padding; the divisor counts the explicit pads only when
    count_include_pad is 1 (never the ceil-mode extension), as onnxruntime does."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.divisor = self._valid_taps(spec.flag("count_include_pad"))

    def run(self, x: np.ndarray) -> np.ndarray:
        xp = pad_nhwc(x, self.pads, 0.0)
        taps = self._taps(xp)
        acc = np.array(next(taps), dtype=np.float32)
        for tap in taps:
            acc += tap
        acc /= self.divisor
        return acc


class _GlobalPool2D(Kernel):
    """Shared shape check: [N, H, W, C] -> [N, 1, 1, C]."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, _, _, c = spec.input_rank(0, 4)
        spec.expect_shape((n, 1, 1, c))


class GlobalAvgpool2D(_GlobalPool2D):
    """Mean over H and W, summed in float32."""

    def run(self, x: np.ndarray) -> np.ndarray:
        return x.mean(axis=(1, 2), keepdims=True, dtype=np.float32)


class GlobalMaxpool2D(_GlobalPool2D):
    """Max over H and W."""

    exact = True

    def run(self, x: np.ndarray) -> np.ndarray:
        return x.max(axis=(1, 2), keepdims=True)
