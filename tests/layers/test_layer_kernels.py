"""Simulator kernels against fp32 onnxruntime on random shapes.

Each case builds a single ONNX node (NCHW) and the equivalent single-layer Nodes-JSON +
Constants-JSON by hand (NHWC between two layout_transforms, OHWI weights: docs/FORMATS.md).
Tolerance: the per-element fp16 bound of ``onnxref.fp16_bound`` (3 float16 roundings of the
op applied to absolute values), or exact equality where fp16 rounding of the input is the only
change (max pooling, data movement).
"""
from __future__ import annotations

import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mrvl_convert.errors import Fp16RangeError
from mrvl_convert.runtime import MrvlSimulator
from mrvl_convert.kernels.gemm import GEMM_ENGINES
from support.jsonbuild import SubgraphBuilder, conv2d, fc, nhwc, pool, to_nchw, to_nhwc
from support.onnxref import (ORT_OLD_CEIL_POOLING, assert_close_fp16, ceil_pool_quirks, fp16_round,
                             run_node)
from support.simulate import nchw_layer, simulate

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def rng_for(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------- conv
@st.composite
def conv_cases(draw):
    mode = draw(st.sampled_from(["dense", "depthwise", "grouped"]))
    groups = 1 if mode == "dense" else draw(st.integers(2, 4))
    cin_g = 1 if mode == "depthwise" else draw(st.integers(1, 5))
    cout_g = 1 if mode == "depthwise" else draw(st.integers(1, 6))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    assume(h + pads[0] + pads[2] >= dil[0] * (kh - 1) + 1)
    assume(w + pads[1] + pads[3] >= dil[1] * (kw - 1) + 1)
    return dict(n=draw(st.integers(1, 2)), c=cin_g * groups, o=cout_g * groups, h=h, w=w,
                k=(kh, kw), dil=dil, pads=pads, strides=strides, groups=groups,
                bias=draw(st.booleans()), relu=draw(st.booleans()),
                seed=draw(st.integers(0, 2 ** 16)), gemm=draw(st.sampled_from(GEMM_ENGINES)))


def _conv_onnx(x, weight, bias, case):
    attrs = dict(kernel_shape=list(case["k"]), strides=list(case["strides"]),
                 pads=list(case["pads"]), dilations=list(case["dil"]), group=case["groups"])
    inits = {"w": weight} if bias is None else {"w": weight, "b": bias}
    y = run_node("Conv", {"x": x}, 4, inits, **attrs)
    inits_abs = {k: np.abs(v) for k, v in inits.items()}
    magnitude = run_node("Conv", {"x": np.abs(x)}, 4, inits_abs, **attrs)
    return (np.maximum(y, 0) if case["relu"] else y), magnitude


@settings(SETTINGS, max_examples=80)
@given(conv_cases())
def test_conv2d_matches_onnxruntime(case):
    rng = rng_for(case["seed"])
    x = rng.standard_normal((case["n"], case["c"], case["h"], case["w"])).astype(np.float32)
    weight = rng.standard_normal((case["o"], case["c"] // case["groups"]) + case["k"]) \
        .astype(np.float32)
    bias = rng.standard_normal(case["o"]).astype(np.float32) if case["bias"] else None
    want, magnitude = _conv_onnx(x, weight, bias, case)
    got = nchw_layer(x, lambda b, t: conv2d(
        b, t, weight, bias, want.shape[2:], strides=case["strides"], pads=case["pads"],
        dilations=case["dil"], group=case["groups"], relu=case["relu"]), case["gemm"])
    assert_close_fp16(got, want, magnitude)


@pytest.mark.parametrize("gemm", GEMM_ENGINES)
@pytest.mark.parametrize("shape,k,stride,group", [
    ((1, 64, 56, 56), 1, 1, 1),     # pointwise: one plain matmul
    ((1, 32, 28, 28), 1, 2, 1),     # strided pointwise (ResNet downsample)
    ((2, 16, 15, 15), 3, 1, 16),    # depthwise 3x3
    ((1, 8, 9, 9), 3, 2, 8),        # depthwise, stride 2
    ((1, 12, 10, 10), 3, 1, 3),     # grouped
])
def test_conv2d_common_shapes(shape, k, stride, group, gemm):
    rng = rng_for(7)
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.standard_normal((shape[1], shape[1] // group, k, k)).astype(np.float32)
    bias = rng.standard_normal(shape[1]).astype(np.float32)
    pad = k // 2
    case = dict(k=(k, k), strides=(stride, stride), pads=(pad,) * 4, dil=(1, 1), groups=group,
                relu=True)
    want, magnitude = _conv_onnx(x, weight, bias, case)
    got = nchw_layer(x, lambda b, t: conv2d(b, t, weight, bias, want.shape[2:],
                                            strides=case["strides"], pads=case["pads"],
                                            group=group, relu=True), gemm)
    assert_close_fp16(got, want, magnitude)


# ----------------------------------------------------------------------------- FC
@SETTINGS
@given(n=st.integers(1, 4), i=st.integers(1, 300), o=st.integers(1, 40), bias=st.booleans(),
       relu=st.booleans(), seed=st.integers(0, 2 ** 16), gemm=st.sampled_from(GEMM_ENGINES))
def test_fc_matches_onnxruntime_gemm(n, i, o, bias, relu, seed, gemm):
    rng = rng_for(seed)
    x = rng.standard_normal((n, i)).astype(np.float32)
    weight = rng.standard_normal((o, i)).astype(np.float32)
    b_ = rng.standard_normal(o).astype(np.float32)
    inits = {"w": weight, "b": b_} if bias else {"w": weight}
    want = run_node("Gemm", {"x": x}, 2, inits, transB=1)
    magnitude = run_node("Gemm", {"x": np.abs(x)}, 2, {k: np.abs(v) for k, v in inits.items()},
                         transB=1)
    if relu:
        want = np.maximum(want, 0)
    b = SubgraphBuilder()
    out = fc(b, b.input("x", x.shape), weight, b_ if bias else None, relu=relu)
    assert_close_fp16(simulate(b, [out], {"x": x}, gemm)[0], want, magnitude)


# -------------------------------------------------------------------------- pools
@st.composite
def pool_cases(draw):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    pads = (draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)),
            draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)))
    h, w = draw(st.integers(kh, 13)), draw(st.integers(kw, 13))
    return dict(n=draw(st.integers(1, 2)), c=draw(st.integers(1, 6)), h=h, w=w, k=(kh, kw),
                pads=pads, strides=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                ceil=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 16)))


def _pool_attrs(case):
    return dict(kernel_shape=list(case["k"]), strides=list(case["strides"]),
                pads=list(case["pads"]), ceil_mode=int(case["ceil"]))


def _refereed(case, dilations=(1, 1), include_pad: bool = False) -> bool:
    """Whether the installed onnxruntime pools this case as today's ONNX spec does."""
    if not ORT_OLD_CEIL_POOLING:
        return True
    quirks = ceil_pool_quirks((case["h"], case["w"]), case["k"], case["strides"], case["pads"],
                              dilations, case["ceil"])
    return "late window" not in quirks and not (include_pad and "past padding" in quirks)


@SETTINGS
@given(case=pool_cases(), dilated=st.booleans())
def test_maxpool_is_exact_on_fp16_inputs(case, dilated):
    dil = (2, 1) if dilated else (1, 1)
    assume(case["h"] + case["pads"][0] + case["pads"][2] >= dil[0] * (case["k"][0] - 1) + 1)
    assume(_refereed(case, dil))
    x = rng_for(case["seed"]).standard_normal((case["n"], case["c"], case["h"], case["w"])) \
        .astype(np.float32)
    want = run_node("MaxPool", {"x": fp16_round(x)}, 4, dilations=list(dil), **_pool_attrs(case))
    got = nchw_layer(x, lambda b, t: pool(
        b, t, "Maxpool2D", want.shape[2:], case["k"], strides=case["strides"],
        pads=case["pads"], dilations=dil, ceil_mode=case["ceil"]))
    np.testing.assert_array_equal(got, want)


def test_maxpool_skips_rounding_unless_a_window_is_all_padding():
    """Max pooling selects input values, so its output needs no fp16 rounding (``exact``); a
    window that sees only padding yields -inf, and then the range check must stay on."""
    def compiled_pool(pads, dilations, out_hw):
        b = SubgraphBuilder()
        out = pool(b, to_nhwc(b, b.input("x", (1, 2, 3, 3))), "Maxpool2D", out_hw, (2, 2),
                   pads=pads, dilations=dilations)
        with tempfile.TemporaryDirectory() as tmp:
            return MrvlSimulator().compile(*b.write(tmp, [to_nchw(b, out)]))

    def maxpool_kernel(compiled):
        return next(s.kernel for s in compiled.steps if s.spec.layer_name == "Maxpool2D")

    assert maxpool_kernel(compiled_pool((1, 1, 1, 1), (1, 1), (4, 4))).exact
    # Dilation 2 with 3 pixels of padding: the first window's taps are at -3 and -1.
    hollow = compiled_pool((3, 3, 3, 3), (2, 2), (7, 7))
    assert not maxpool_kernel(hollow).exact
    with pytest.raises(Fp16RangeError, match="Maxpool2D.*inf"):
        hollow.run({"x": np.ones((1, 2, 3, 3), np.float32)})


@SETTINGS
@given(case=pool_cases(), include_pad=st.booleans())
def test_avgpool_matches_onnxruntime(case, include_pad):
    assume(_refereed(case, include_pad=include_pad))
    x = rng_for(case["seed"]).standard_normal((case["n"], case["c"], case["h"], case["w"])) \
        .astype(np.float32)
    attrs = dict(_pool_attrs(case), count_include_pad=int(include_pad))
    want = run_node("AveragePool", {"x": x}, 4, **attrs)
    magnitude = run_node("AveragePool", {"x": np.abs(x)}, 4, **attrs)
    got = nchw_layer(x, lambda b, t: pool(
        b, t, "Avgpool2D", want.shape[2:], case["k"], strides=case["strides"],
        pads=case["pads"], ceil_mode=case["ceil"], count_include_pad=include_pad))
    assert_close_fp16(got, want, magnitude, roundings=2)


@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (2, 16, 5, 9), (1, 1, 1, 1)])
def test_global_pools(shape):
    x = rng_for(3).standard_normal(shape).astype(np.float32)
    for op, layer in (("GlobalAveragePool", "GlobalAvgpool2D"),
                      ("GlobalMaxPool", "GlobalMaxpool2D")):
        want = run_node(op, {"x": x}, 4)
        magnitude = run_node(op, {"x": np.abs(x)}, 4)
        got = nchw_layer(x, lambda b, t: b.layer(layer, [t], [shape[0], 1, 1, shape[1]]))
        if layer == "GlobalMaxpool2D":
            np.testing.assert_array_equal(got, fp16_round(want))
        else:
            assert_close_fp16(got, want, magnitude, roundings=2)


# ---------------------------------------------------------------- elementwise, data
@SETTINGS
@given(shape=st.lists(st.integers(1, 6), min_size=4, max_size=4), relu=st.booleans(),
       const=st.sampled_from([None, "channel", "full"]), seed=st.integers(0, 2 ** 16))
def test_sum2d_matches_onnxruntime_add(shape, relu, const, seed):
    rng = rng_for(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    b = SubgraphBuilder()
    inp = b.input("x", nhwc(shape), layout="NHWC")
    if const is None:
        x2 = rng.standard_normal(shape).astype(np.float32)
        inp2 = b.input("x2", nhwc(shape), layout="NHWC")
        want = run_node("Add", {"x": x, "x2": x2}, 4)
        magnitude = np.abs(x) + np.abs(x2)
        out = b.layer("Sum2D", [inp, inp2], nhwc(shape), {"activation_type": ["relu"]} if relu
                      else {})
        feed = {"x": x.transpose(0, 2, 3, 1), "x2": x2.transpose(0, 2, 3, 1)}
    else:
        cshape = (1, shape[1], 1, 1) if const == "channel" else tuple(shape)
        c = rng.standard_normal(cshape).astype(np.float32)
        want = run_node("Add", {"x": x}, 4, {"c": c})
        magnitude = np.abs(x) + np.abs(c)
        attrs = {"activation_type": ["relu"]} if relu else {}
        out = b.layer("Sum2D", [inp], nhwc(shape), attrs,
                      {"input_const_name": c.transpose(0, 2, 3, 1)})
        feed = {"x": x.transpose(0, 2, 3, 1)}
    if relu:
        want = np.maximum(want, 0)
    got = simulate(b, [out], feed)[0].transpose(0, 3, 1, 2)
    assert_close_fp16(got, want, magnitude)


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_concat_is_exact(axis):
    rng = rng_for(axis)
    base = [2, 3, 4, 5]
    parts = []
    for k in (1, 2, 3):
        shape = list(base)
        shape[axis] = k
        parts.append(rng.standard_normal(shape).astype(np.float32))
    b = SubgraphBuilder()
    inputs = [b.input(f"x{k}", p.shape, layout="NHWC") for k, p in enumerate(parts)]
    out_shape = list(base)
    out_shape[axis] = 6
    out = b.layer("Concat", inputs, out_shape, {"axis": [axis]})
    got = simulate(b, [out], {f"x{k}": p for k, p in enumerate(parts)})[0]
    np.testing.assert_array_equal(got, fp16_round(np.concatenate(parts, axis=axis)))


@pytest.mark.parametrize("layer,in_shape,out_shape", [
    ("reshape", (2, 3, 4, 5), (2, 60)),
    ("nn.batch_flatten", (1, 7, 7, 32), (1, 1568)),
    ("squeeze", (3, 1, 1, 8), (3, 8)),
])
def test_reshape_family_is_exact(layer, in_shape, out_shape):
    x = rng_for(1).standard_normal(in_shape).astype(np.float32)
    b = SubgraphBuilder()
    out = b.layer(layer, [b.input("x", in_shape, layout="NHWC")], out_shape)
    np.testing.assert_array_equal(simulate(b, [out], {"x": x})[0],
                                  fp16_round(x).reshape(out_shape))


def test_layout_transform_is_exact_both_ways():
    x = rng_for(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = SubgraphBuilder()
    inp = b.input("x", x.shape)
    there = to_nhwc(b, inp)
    back = to_nchw(b, there)
    got_there, got_back = simulate(b, [there, back], [x])
    np.testing.assert_array_equal(got_there, fp16_round(x).transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(got_back, fp16_round(x))


def test_outputs_are_float32_on_the_fp16_grid():
    x = rng_for(4).standard_normal((1, 2, 5, 5)).astype(np.float32) * 3
    w = rng_for(5).standard_normal((4, 2, 3, 3)).astype(np.float32)
    got = nchw_layer(x, lambda b, t: conv2d(b, t, w, None, (3, 3)))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, fp16_round(got))
