"""Winograd F(2x2, 3x3): the simulator's algorithm for dense 3x3, stride-1, undilated Conv2D.

Why: these convolutions are 37% of ResNet-50's multiply-adds, and F(2x2, 3x3) computes each
2x2 output tile with 16 products per input/output channel pair instead of 36 (Lavin & Gray,
"Fast Algorithms for Convolutional Neural Networks", 2016). The price is three linear transforms
(input tiles, weights, output tiles). The weights are transformed once, by the conv's first
numpy run (``Conv2DKernel``, ``LazyWeights``); the input and output transforms, whose matrices
hold only 0 and +-1, run as separable adds and subtracts on whole arrays (8 numpy calls each),
which measured faster than the same transforms as matrix products (docs/BENCHMARKS.md).

Numbers: the operands are still the fp16-valued inputs and weights, and everything is summed in
float32, so the fp16 model of ``fp16.py`` is unchanged. What changes is float32 rounding inside
the layer: the transforms add and subtract up to 16 terms, an error far below float16's step
(``python benchmarks/winograd_error.py`` measures it against float64 and im2col; figures in
docs/BENCHMARKS.md). F(4x4, 3x3) would save more products, but its transforms multiply by up to 8
and divide by 24 (ten times the error). ``tests/kernels/test_winograd.py`` pins the error
bound and where the algorithm is used.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine

TILE_OUT = 2   # m: each tile yields m x m outputs
TILE_IN = 4    # m + r - 1 for r = 3: input tile size
MIN_CHANNELS = 64   # the narrowest ResNet stage; narrower layers were not measured to pay
MIN_TILES = 32      # below, the 16 per-position GEMMs are too short to run fast

# B^T and A^T are applied by _apply_bt and _apply_at, written out; tests check them against these.
_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def applies(kernel_hw: Tuple[int, int], strides: Tuple[int, int], dilation: Tuple[int, int],
            groups: int, out_hw: Tuple[int, int], in_channels: int, out_channels: int) -> bool:
    """Whether a conv is computed this way: dense 3x3, stride 1, dilation 1, and where it pays.

    The transforms cost in proportion to C + O per tile, the products to C * O, and the products
    are 16 small GEMMs of one row per tile: too few tiles make the GEMMs too short, and the
    transformed weights are 16/9 the bytes to stream. The thresholds come from per-layer times
    inside ResNet-50 (``benchmarks/profile_simulator.py``, figures in docs/BENCHMARKS.md).
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
                 out_hw: Tuple[int, int], gemm: GemmEngine = NUMPY_GEMM) -> None:
        o, kh, kw, c = kernel_ohwi.shape
        if (kh, kw) != (3, 3):
            raise ValueError(f"Winograd F(2x2,3x3) needs a 3x3 kernel, got {kh}x{kw}")
        # U[xi, nu] = (G g G^T)[xi, nu] per (c, o), computed in float64 from the fp16 weights
        # and rounded once to float32.
        u = np.einsum("xi,oijc,yj->xyco", _G, kernel_ohwi.astype(np.float64), _G)
        self.product = gemm.bind(u.reshape(TILE_IN * TILE_IN, c, o).astype(np.float32))
        self.pads = pads
        self.out_hw = out_hw
        self.tiles = tile_grid(out_hw)
        self.out_channels = o

    def run(self, x: np.ndarray) -> np.ndarray:
        n, h, w, c = x.shape
        (th, tw), m = self.tiles, TILE_OUT
        top, left = self.pads[0], self.pads[1]
        # Zero padding, extended at the bottom/right to whole tiles (th*m + 2 >= top + h + bottom
        # because oh = h + top + bottom - 2); _output_transform crops the extra outputs.
        xp = np.zeros((n, th * m + 2, tw * m + 2, c), np.float32)
        xp[:, top:top + h, left:left + w, :] = x
        prod = self.product(_input_transform(xp, th, tw))               # [16, T, O]
        return _output_transform(prod, n, self.tiles, self.out_hw)


def _input_transform(xp: np.ndarray, th: int, tw: int) -> np.ndarray:
    """B^T d B for every 4x4 input tile d of the padded NHWC array: [16, N*TH*TW, C].

    Separable: B^T along H on whole padded rows first (the tiles still overlap there, so each
    row is combined once, not twice), then along W straight into the tile-major result.
    """
    n, _, wp, c = xp.shape
    across = np.empty((TILE_IN, n, th, wp, c), np.float32)
    _apply_bt([xp[:, k:k + TILE_OUT * th:TILE_OUT] for k in range(TILE_IN)], across)
    v = np.empty((TILE_IN, TILE_IN, n, th, tw, c), np.float32)
    _apply_bt([across[..., k:k + TILE_OUT * tw:TILE_OUT, :] for k in range(TILE_IN)],
              v.transpose(1, 0, 2, 3, 4, 5))
    return v.reshape(TILE_IN * TILE_IN, n * th * tw, c)


def _apply_bt(d: Sequence[np.ndarray], out: np.ndarray) -> None:
    """out[k] = sum_i B^T[k, i] d[i]: the rows of B^T, one add or subtract each."""
    np.subtract(d[0], d[2], out=out[0])
    np.add(d[1], d[2], out=out[1])
    np.subtract(d[2], d[1], out=out[2])
    np.subtract(d[1], d[3], out=out[3])


def _output_transform(prod: np.ndarray, n: int, tiles: Tuple[int, int],
                      out_hw: Tuple[int, int]) -> np.ndarray:
    """A^T m A for every 4x4 product tile m, written straight into the NHWC output."""
    (th, tw), o = tiles, prod.shape[-1]
    tile = prod.reshape(TILE_IN, TILE_IN, n, th, tw, o)
    # A^T along the tile's H first: its operands are contiguous [4, T, O] blocks of prod.
    half = np.empty((TILE_OUT, TILE_IN, n, th, tw, o), np.float32)
    _apply_at(tile, half)
    # Then along W, into y[:, :, i, :, j] seen as [j][i, N, TH, TW, O].
    y = np.empty((n, th, TILE_OUT, tw, TILE_OUT, o), np.float32)
    _apply_at(half.transpose(1, 0, 2, 3, 4, 5), y.transpose(4, 2, 0, 1, 3, 5))
    y = y.reshape(n, th * TILE_OUT, tw * TILE_OUT, o)
    if y.shape[1:3] != out_hw:
        y = np.ascontiguousarray(y[:, :out_hw[0], :out_hw[1], :])
    return y


def _apply_at(m: Sequence[np.ndarray], out: np.ndarray) -> None:
    """out[k] = sum_i A^T[k, i] m[i] for A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]."""
    np.add(m[0], m[1], out=out[0])
    out[0] += m[2]
    np.subtract(m[1], m[2], out=out[1])
    out[1] -= m[3]
