"""Kernels of the newer set's data-movement kinds (Resize2D, Split, StridedSlice, transpose,
ReduceMean, ReduceMax) against fp32 onnxruntime on random shapes.

Each kernel is compiled from a hand-written layer (physical NHWC shapes and attributes as the
Nodes-JSON holds them, docs/FORMATS.md) and run on the fp16-rounded input; the reference is
onnxruntime's single ONNX node on the same values in NCHW. Data movement and max are exact
(equality); the mean is within ``assert_close_fp16``'s bound.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.layers import CATALOGUE
from mrvl_convert.kernels.fp16 import round_to_fp16
from mrvl_convert.kernels.layerspec import LayerSpec
from support.onnxref import assert_close_fp16, fp16_round, run_model, run_node, single_node_model

SEEDS = range(8)


def kernel(name: str, attrs: Dict[str, Any], in_shape: Sequence[int],
           out_shapes: Sequence[Sequence[int]]):
    strs = {k: [str(int(x)) for x in v] if isinstance(v, (list, tuple)) else [str(v)]
            for k, v in attrs.items()}
    outs = tuple(tuple(s) for s in out_shapes)
    spec = LayerSpec(1, "layer", name, strs, (tuple(in_shape),), outs[0], (), "test.json",
                     CATALOGUE[name], outs)
    return CATALOGUE[name].kernel(spec, {})


def run(k, x: np.ndarray):
    out = k.run(x)
    if not k.exact:
        out, _ = round_to_fp16(np.array(out, np.float32), inplace=True)
    return out


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def random_input(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    return fp16_round(rng.standard_normal(shape).astype(np.float32) * 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_resize2d_matches_onnxruntime_nearest(seed):
    rng = np.random.default_rng(seed)
    n, c, h, w = 1, int(rng.integers(1, 6)), int(rng.integers(1, 7)), int(rng.integers(1, 7))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    coord, rounding = [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                       ("pytorch_half_pixel", "round_prefer_ceil")][seed % 3]
    x = random_input(rng, [n, c, h, w])
    want = run_node("Resize", {"x": x}, 4, {"roi": np.zeros(0, np.float32),
                                            "scales": np.array([1, 1, sh, sw], np.float32)},
                    mode="nearest", coordinate_transformation_mode=coord, nearest_mode=rounding)
    k = kernel("Resize2D", {"size": (h * sh, w * sw), "layout": "NHWC",
                            "method": "nearest_neighbor"}, [n, h, w, c],
               [[n, h * sh, w * sw, c]])
    np.testing.assert_array_equal(nchw(run(k, nhwc(x))), want)


@pytest.mark.parametrize("seed", SEEDS)
def test_split_matches_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    shape = [1, int(rng.integers(2, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 6))]
    axis = int(rng.integers(1, 4))
    cuts = sorted(rng.choice(np.arange(1, shape[axis]), size=min(2, shape[axis] - 1),
                             replace=False).tolist()) if shape[axis] > 1 else []
    sizes = np.diff([0, *cuts, shape[axis]]).astype(np.int64)
    x = random_input(rng, shape)
    outs = [f"y{i}" for i in range(len(sizes))]
    node = helper.make_node("Split", ["x", "split"], outs, axis=axis)
    graph = helper.make_graph(
        [node], "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(sizes, "split")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    want = run_model(model, {"x": x})
    phys_axis = (0, 2, 3, 1).index(axis)
    outs = [list(np.transpose(np.zeros(w.shape), (0, 2, 3, 1)).shape) for w in want]
    k = kernel("Split", {"axis": phys_axis}, list(nhwc(x).shape), outs)
    got = run(k, nhwc(x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(nchw(g), w)


@pytest.mark.parametrize("seed", SEEDS)
def test_strided_slice_matches_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    shape = [1] + [int(rng.integers(1, 9)) for _ in range(3)]
    axes = [a for a in (1, 2, 3) if rng.random() < 0.7] or [1]
    starts = [int(rng.integers(-shape[a], shape[a])) for a in axes]
    ends = [int(rng.integers(-shape[a], shape[a] + 3)) for a in axes]
    steps = [int(rng.integers(1, 3)) for _ in axes]
    x = random_input(rng, shape)
    consts = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
              "axes": np.array(axes, np.int64), "steps": np.array(steps, np.int64)}
    model = single_node_model("Slice", {"x": x}, 4)
    model.graph.node[0].input.extend(consts)
    model.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in consts.items())
    [want] = run_model(model, {"x": x})
    begin, end, strides = [0] * 4, list(shape), [1] * 4
    for a, s, e, st in zip(axes, starts, ends, steps):
        b, e2, _ = slice(s, e, st).indices(shape[a])
        begin[a], end[a], strides[a] = b, max(b, e2), st
    perm = (0, 2, 3, 1)
    k = kernel("StridedSlice", {"begin": [begin[p] for p in perm], "end": [end[p] for p in perm],
                                "strides": [strides[p] for p in perm], "slice_mode": "end"},
               list(nhwc(x).shape), [list(nhwc(want).shape)])
    np.testing.assert_array_equal(nchw(run(k, nhwc(x))), want)


@pytest.mark.parametrize("seed", SEEDS)
def test_transpose_matches_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    rank = 3 + seed % 2
    shape = [int(rng.integers(1, 6)) for _ in range(rank)]
    axes = [int(a) for a in rng.permutation(rank)]
    x = random_input(rng, shape)
    want = run_node("Transpose", {"x": x}, rank, perm=axes)
    k = kernel("transpose", {"axes": axes}, shape, [list(want.shape)])
    np.testing.assert_array_equal(run(k, x), want)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax"])
def test_reduce_matches_onnxruntime(op, seed):
    rng = np.random.default_rng(seed)
    rank = 4 if op == "ReduceMean" else 3
    shape = [1] + [int(rng.integers(1, 12)) for _ in range(rank - 1)]
    axis, keep = int(rng.integers(1, rank)), int(seed % 2)
    x = random_input(rng, shape)
    want = run_node(op, {"x": x}, rank - 1 + keep, opset=13, axes=[axis], keepdims=keep)
    k = kernel(op, {"axis": axis, "keepdims": keep}, shape, [list(want.shape)])
    got = run(k, x)
    if op == "ReduceMax":
        np.testing.assert_array_equal(got, want)
    else:
        magnitude = np.mean(np.abs(x), axis=axis, keepdims=bool(keep))
        assert_close_fp16(got, want, magnitude, roundings=2)


def test_split_kernel_refuses_pieces_that_do_not_add_up():
    from mrvl_convert.errors import ArtifactError
    with pytest.raises(ArtifactError, match="do not add up"):
        kernel("Split", {"axis": 3}, [1, 2, 2, 8], [[1, 2, 2, 3], [1, 2, 2, 3]])


def test_resize2d_kernel_refuses_a_non_integer_scale():
    from mrvl_convert.errors import ArtifactError
    with pytest.raises(ArtifactError, match="scaled by integers"):
        kernel("Resize2D", {"size": (5, 4)}, [1, 2, 2, 3], [[1, 5, 4, 3]])


@pytest.mark.parametrize("seed", SEEDS)
def test_conv2d_transpose_matches_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    cin, cout = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    h, w = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    strides = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    dilations = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    pads = [int(rng.integers(0, 2)) for _ in range(4)]
    extra = [int(rng.integers(0, s)) for s in strides]
    full = [(n - 1) * s + (k - 1) * d + 1 + e for n, s, k, d, e in
            zip((h, w), strides, (kh, kw), dilations, extra)]
    if full[0] - pads[0] - pads[2] < 1 or full[1] - pads[1] - pads[3] < 1:
        pads = [0, 0, 0, 0]
    x = random_input(rng, [1, cin, h, w])
    weight = fp16_round(rng.standard_normal([cin, cout, kh, kw]).astype(np.float32))
    bias = fp16_round(rng.standard_normal(cout).astype(np.float32))
    attrs = dict(strides=strides, dilations=dilations, pads=pads, output_padding=extra)
    want = run_node("ConvTranspose", {"x": x}, 4, {"w": weight, "b": bias}, **attrs)
    magnitude = run_node("ConvTranspose", {"x": np.abs(x)}, 4,
                         {"w": np.abs(weight), "b": np.abs(bias)}, **attrs)
    spec_attrs = {"strides": strides, "dilation": dilations, "padding": pads,
                  "output_padding": extra, "groups": 1, "channels": cout,
                  "kernel_size": [kh, kw], "kernel_const_name": "k", "bias_const_name": "b"}
    strs = {k: [str(v) for v in vs] if isinstance(vs, list) else [str(vs)]
            for k, vs in spec_attrs.items()}
    out = tuple(nhwc(want).shape)
    spec = LayerSpec(1, "layer", "Conv2DTranspose", strs, ((1, h, w, cin),), out, (), "t.json",
                     CATALOGUE["Conv2DTranspose"], (out,))
    k = CATALOGUE["Conv2DTranspose"].kernel(
        spec, {"k": np.ascontiguousarray(weight.transpose(1, 2, 3, 0)),
               "b": bias.reshape(1, 1, 1, cout)})
    assert_close_fp16(nchw(run(k, nhwc(x))), want, magnitude)


@pytest.mark.parametrize("seed", SEEDS)
def test_batch_matmul_matches_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    lead = [int(rng.integers(1, 4)) for _ in range(1 + seed % 2)]
    m, k_, n = (int(rng.integers(1, 9)) for _ in range(3))
    a = random_input(rng, lead + [m, k_])
    b = random_input(rng, ([] if seed % 3 == 0 else lead[-1:]) + [k_, n])
    want = run_model(single_node_model("MatMul", {"a": a, "b": b}, len(lead) + 2), {"a": a, "b": b})[0]
    magnitude = np.matmul(np.abs(a), np.abs(b))
    if seed % 2:   # constant second operand
        spec = LayerSpec(1, "l", "BatchMatmul", {"input_const_name": ["c"]}, (a.shape,),
                         want.shape, (), "t.json", CATALOGUE["BatchMatmul"], (want.shape,))
        k = CATALOGUE["BatchMatmul"].kernel(spec, {"c": b})
        got = run(k, a)
    else:
        spec = LayerSpec(1, "l", "BatchMatmul", {}, (a.shape, b.shape), want.shape, (),
                         "t.json", CATALOGUE["BatchMatmul"], (want.shape,))
        k = CATALOGUE["BatchMatmul"].kernel(spec, {})
        got = k.run(a, b)
        got, _ = round_to_fp16(np.array(got, np.float32), inplace=True)
    assert_close_fp16(got, want, magnitude, roundings=2)


def test_batch_matmul_kernel_refuses_operands_that_do_not_multiply():
    from mrvl_convert.errors import ArtifactError
    spec = LayerSpec(1, "l", "BatchMatmul", {}, ((2, 3, 4), (2, 5, 6)), (2, 3, 6), (), "t.json",
                     CATALOGUE["BatchMatmul"], ((2, 3, 6),))
    with pytest.raises(ArtifactError, match="do not multiply as matrices"):
        CATALOGUE["BatchMatmul"].kernel(spec, {})
