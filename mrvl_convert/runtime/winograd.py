"""Winograd F(2x2, 3x3): the simulator's algorithm for dense 3x3, stride-1, undilated Conv2D.

Why: these convolutions are 37% of ResNet-50's multiply-adds, and F(2x2, 3x3) computes each
2x2 output tile with 16 products per input/output channel pair instead of 36 (Lavin & Gray,
"Fast Algorithms for Convolutional Neural Networks", 2016). The price is three linear transforms
(input tiles, weights, output tiles), done here as small matrix products.

Numbers: the operands are still the fp16-valued inputs and weights, and everything is summed in
float32, so the fp16 model of ``fp16.py`` is unchanged. What changes is float32 rounding inside
the layer: the transforms add and subtract up to 16 terms, so the error against float64 is
usually larger than im2col's (largest seen on ResNet-50's three Winograd layer shapes, relative
to the layer's largest output: 3.0e-7 to 5.7e-7, against 3.2e-7 to 5.0e-7 for im2col), still
far below float16's step (4.9e-4). After the fp16 rounding of the output, 0.17-0.32% of a
ResNet layer's values land one fp16 step away from the exactly rounded result, against
0.13-0.2% for im2col: the same kind of difference that summing in another order makes.
F(4x4, 3x3) would save more products, but its transforms multiply by up to 8 and divide by 24
(ten times the error), and it was not faster here. ``tests/runtime/test_runtime_winograd.py``
pins the error bound and where the algorithm is used.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

TILE_OUT = 2   # m: each tile yields m x m outputs
TILE_IN = 4    # m + r - 1 for r = 3: input tile size
MIN_CHANNELS = 64   # the narrowest ResNet stage; narrower layers were not measured to pay
MIN_TILES = 32      # below, the 16 per-position GEMMs are too short to run fast

_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
# Both 2-D transforms as one matrix each, acting on a tile flattened row-major.
_INPUT_TRANSFORM = np.kron(_BT, _BT).astype(np.float32)    # [16, 16]
_OUTPUT_TRANSFORM = np.kron(_AT, _AT).astype(np.float32)   # [4, 16]


def applies(kernel_hw: Tuple[int, int], strides: Tuple[int, int], dilation: Tuple[int, int],
            groups: int, out_hw: Tuple[int, int], in_channels: int, out_channels: int) -> bool:
    """Whether a conv is computed this way: dense 3x3, stride 1, dilation 1, and where it pays.

    The transforms cost in proportion to C + O per tile, the products to C * O, and the products
    are 16 small GEMMs of one row per tile. Measured inside ResNet-50 (per-layer times as
    ``benchmarks/profile_simulator.py`` prints them, with this test forced each way): Winograd
    is faster at 28x28x128 and 14x14x256; at 56x56x64 it saves 1% of the network's time with
    OpenBLAS's AVX-512 kernels and 4% with its Haswell ones (whole-network runs of both forms
    alternated in one process); it is slower at 7x7x512 (16 tiles: GEMMs too short, and 16/9
    the weight bytes to stream).
    """
    if not (kernel_hw == (3, 3) and strides == (1, 1) and dilation == (1, 1) and groups == 1):
        return False
    th, tw = tile_grid(out_hw)
    return min(in_channels, out_channels) >= MIN_CHANNELS and th * tw >= MIN_TILES


def tile_grid(out_hw: Tuple[int, int]) -> Tuple[int, int]:
    """Tiles down and across: enough m x m output tiles to cover the output (ceil division)."""
    return -(-out_hw[0] // TILE_OUT), -(-out_hw[1] // TILE_OUT)


class Winograd3x3:
    """One convolution's transformed weights; ``run`` maps the unpadded NHWC input to the NHWC
    output before bias and activation (the caller adds those, as for any other algorithm)."""

    def __init__(self, kernel_ohwi: np.ndarray, pads: Tuple[int, int, int, int],
                 out_hw: Tuple[int, int]) -> None:
        o, kh, kw, c = kernel_ohwi.shape
        if (kh, kw) != (3, 3):
            raise ValueError(f"Winograd F(2x2,3x3) needs a 3x3 kernel, got {kh}x{kw}")
        # U[xi, nu] = (G g G^T)[xi, nu] per (c, o), computed in float64 from the fp16 weights
        # and rounded once to float32.
        u = np.einsum("xi,oijc,yj->xyco", _G, kernel_ohwi.astype(np.float64), _G)
        self.weight = np.ascontiguousarray(u.reshape(TILE_IN * TILE_IN, c, o), np.float32)
        self.pads = pads
        self.out_hw = out_hw
        self.tiles = tile_grid(out_hw)
        self.out_channels = o

    def run(self, x: np.ndarray) -> np.ndarray:
        n, h, w, c = x.shape
        (th, tw), (oh, ow), m, a = self.tiles, self.out_hw, TILE_OUT, TILE_IN
        top, left = self.pads[0], self.pads[1]
        # Zero padding, extended at the bottom/right to whole tiles (th*m + 2 >= top + h + bottom
        # because oh = h + top + bottom - 2); the extra outputs are cropped below.
        xp = np.zeros((n, th * m + 2, tw * m + 2, c), np.float32)
        xp[:, top:top + h, left:left + w, :] = x
        s0, s1, s2, s3 = xp.strides
        tiles = as_strided(xp, (a, a, n, th, tw, c), (s1, s2, s0, m * s1, m * s2, s3),
                           writeable=False)
        d = np.ascontiguousarray(tiles).reshape(a * a, -1)
        v = (_INPUT_TRANSFORM @ d).reshape(a * a, n * th * tw, c)
        prod = np.matmul(v, self.weight)                                # [16, T, O]
        y = _OUTPUT_TRANSFORM @ prod.reshape(a * a, -1)             # [4, T*O]
        y = y.reshape(m, m, n, th, tw, self.out_channels).transpose(2, 3, 0, 4, 1, 5)
        y = y.reshape(n, th * m, tw * m, self.out_channels)[:, :oh, :ow, :]
        return np.ascontiguousarray(y)
