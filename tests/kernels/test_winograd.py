"""Winograd F(2x2, 3x3) (runtime/winograd.py): exact algebra, float32 error, and when it is used.

The reference is a float64 im2col convolution of the same fp16-valued operands, so the only
differences measured are Winograd's own float32 rounding.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mrvl_convert.runtime import MrvlSimulator
from mrvl_convert.kernels.gemm import GEMM_ENGINES, GemmEngine
from mrvl_convert.layers.conv2d import Conv2DKernel as Conv2D
from mrvl_convert.kernels.windows import pad_nhwc, window_view
from mrvl_convert.kernels.winograd import (_AT, _BT, MIN_CHANNELS, MIN_TILES, Winograd3x3,
                                           _apply_at, _apply_bt, applies)
from support.jsonbuild import SubgraphBuilder, conv2d, to_nhwc
from support.onnxref import assert_close_fp16, fp16_round, run_node
from support.simulate import nchw_layer

# Largest float32 error seen against float64 inside ResNet-50, relative to the output's largest
# magnitude, was 6.6e-7 (im2col in float32: 5.1e-7; benchmarks/winograd_error.py); the bound
# leaves an 11x margin and is still 64x below float16's relative step (2**-11).
REL_ERROR = 2.0 ** -17


def conv_f64(x: np.ndarray, w_ohwi: np.ndarray, pads) -> np.ndarray:
    """Direct 3x3 stride-1 NHWC convolution in float64 (im2col, the simulator's other path)."""
    xp = pad_nhwc(x.astype(np.float64), tuple(pads))
    out_hw = (xp.shape[1] - 2, xp.shape[2] - 2)
    cols = window_view(xp, out_hw, (3, 3), (1, 1), (1, 1)).reshape(-1, 9 * x.shape[3])
    weight = w_ohwi.reshape(w_ohwi.shape[0], -1).T.astype(np.float64)
    return (cols @ weight).reshape(x.shape[0], *out_hw, -1)


def fp16_valued(rng: np.random.Generator, shape, scale: float = 1.0) -> np.ndarray:
    return fp16_round(rng.standard_normal(shape) * scale)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), h=st.integers(1, 13), w=st.integers(1, 13), c=st.integers(1, 9),
       o=st.integers(1, 9), pads=st.tuples(*[st.integers(0, 2)] * 4), seed=st.integers(0, 2 ** 16))
def test_winograd_equals_direct_convolution(n, h, w, c, o, pads, seed):
    # Odd sizes (partial last tiles), no or asymmetric padding, one-pixel outputs.
    assume(h + pads[0] + pads[2] >= 3 and w + pads[1] + pads[3] >= 3)
    rng = np.random.default_rng(seed)
    x, weight = fp16_valued(rng, (n, h, w, c)), fp16_valued(rng, (o, 3, 3, c))
    want = conv_f64(x, weight, pads)
    got = Winograd3x3(weight, pads, want.shape[1:3]).run(x)
    assert got.dtype == np.float32 and got.shape == want.shape
    scale = np.abs(want).max(initial=0.0) + 1e-30
    assert np.abs(got - want).max(initial=0.0) <= REL_ERROR * scale


def test_written_out_transforms_are_the_matrices():
    """_apply_bt / _apply_at, the adds and subtracts the kernel runs, equal B^T and A^T applied
    along the first axis (integer-valued data: float32 sums are exact)."""
    d = np.random.default_rng(0).integers(-99, 99, size=(4, 3, 5)).astype(np.float32)
    for apply, matrix in ((_apply_bt, _BT), (_apply_at, _AT)):
        out = np.full((matrix.shape[0], 3, 5), np.nan, np.float32)
        apply(d, out)
        np.testing.assert_array_equal(out, np.tensordot(matrix, d, axes=1))


@pytest.mark.parametrize("gemm", GEMM_ENGINES)
def test_winograd_error_on_resnet_like_layer(gemm):
    """A 28x28x128 ReLU-fed layer: float32 error against float64 stays far below fp16's step,
    whichever library sums the 16 products."""
    rng = np.random.default_rng(3)
    x = np.maximum(fp16_valued(rng, (1, 28, 28, 128)), 0)
    weight = fp16_valued(rng, (128, 3, 3, 128), scale=1 / 34)
    want = conv_f64(x, weight, (1, 1, 1, 1))
    got = Winograd3x3(weight, (1, 1, 1, 1), (28, 28), GemmEngine(gemm)).run(x)
    assert np.abs(got - want).max() <= REL_ERROR * np.abs(want).max()


@pytest.mark.parametrize("hw,channels,expected", [
    ((28, 28), 128, True), ((14, 14), 256, True), ((56, 56), 64, True),
    ((56, 56), 32, False),     # narrower than any layer it was measured on
    ((7, 7), 512, False),      # 16 tiles: GEMMs too short
])
def test_applies_where_it_pays(hw, channels, expected):
    assert applies((3, 3), (1, 1), (1, 1), 1, hw, channels, channels) is expected


@pytest.mark.parametrize("kernel,strides,dilation,groups", [
    ((3, 3), (2, 2), (1, 1), 1), ((3, 3), (1, 1), (2, 2), 1), ((3, 3), (1, 1), (1, 1), 2),
    ((5, 5), (1, 1), (1, 1), 1), ((3, 1), (1, 1), (1, 1), 1)])
def test_applies_only_to_dense_3x3_stride1(kernel, strides, dilation, groups):
    assert not applies(kernel, strides, dilation, groups, (64, 64), 512, 512)


def test_simulator_uses_winograd_and_matches_onnxruntime():
    """Through the simulator (bias, relu, fp16 rounding): the layer is compiled to Winograd and
    stays within the fp16 bound of fp32 onnxruntime."""
    c, hw = MIN_CHANNELS, 2 * int(np.ceil(np.sqrt(MIN_TILES))) + 1   # odd: a partial tile
    assert applies((3, 3), (1, 1), (1, 1), 1, (hw, hw), c, c)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    weight = (rng.standard_normal((c, c, 3, 3)) / 34).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    want = np.maximum(run_node("Conv", {"x": x}, 4, {"w": weight, "b": bias}, **attrs), 0)
    magnitude = run_node("Conv", {"x": np.abs(x)}, 4, {"w": np.abs(weight), "b": np.abs(bias)},
                         **attrs)
    got = nchw_layer(x, lambda b, t: conv2d(b, t, weight, bias, (hw, hw), pads=(1, 1, 1, 1),
                                            relu=True))
    assert_close_fp16(got, want, magnitude)


def test_compiled_conv_mode_is_winograd(tmp_path):
    b = SubgraphBuilder()
    weight = np.ones((MIN_CHANNELS, MIN_CHANNELS, 3, 3), np.float32)
    big = conv2d(b, to_nhwc(b, b.input("x", (1, MIN_CHANNELS, 16, 16))), weight, None,
                 (16, 16), pads=(1, 1, 1, 1))
    small = conv2d(b, big, weight, None, (14, 14))           # no padding
    strided = conv2d(b, small, weight, None, (7, 7), strides=(2, 2), pads=(1, 1, 1, 1))
    compiled = MrvlSimulator().compile(*b.write(str(tmp_path), [strided]))
    modes = [step.kernel.mode for step in compiled.steps if isinstance(step.kernel, Conv2D)]
    assert modes == ["winograd", "winograd", "gemm"]
