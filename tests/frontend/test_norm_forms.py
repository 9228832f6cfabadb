"""A norm in an exporter's own spelling (frontend/norm_forms.py): tf2onnx's Keras
LayerNormalization as tf's batchnorm formula and as a BatchNormalization with computed
statistics, rewritten to the decomposed LayerNorm form within the stated float32 bounds on
onnxruntime, and the whole model then on the accelerator; other forms left alone."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization
from support.models import Builder, canonicalized, run_ort

T, C, H = 12, 16, 24
U = 2.0 ** -24
EPS = 1e-3


def _tf_formula(b: Builder, x: str, shape, axis: int) -> str:
    """Keras LayerNormalization(axis) as tf2onnx writes ``tf.nn.batch_normalization``."""
    gamma_shape = [n if i == axis else 1 for i, n in enumerate(shape)]
    gamma = b.const((1 + 0.2 * b.rng.standard_normal(gamma_shape)).astype(np.float32),
                    "ln_gamma")
    beta = b.const((0.3 * b.rng.standard_normal(gamma_shape)).astype(np.float32), "ln_beta")
    mean = b.op("ReduceMean", [x], name="ln_mean", axes=[axis], keepdims=1)
    d = b.op("Sub", [x, mean], name="ln_sqdiff")
    var = b.op("ReduceMean", [b.op("Mul", [d, d], name="ln_sq")], name="ln_var", axes=[axis],
               keepdims=1)
    eps = b.const(np.array(EPS, np.float32))
    r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, eps], name="ln_add")],
                                 name="ln_sqrt")], name="ln_rsqrt")
    s = b.op("Mul", [r, gamma], name="ln_scale")
    shift = b.op("Sub", [beta, b.op("Mul", [mean, s], name="ln_mean_scaled")], name="ln_shift")
    return b.op("Add", [b.op("Mul", [x, s], name="ln_x_scaled"), shift], name="ln_out")


def _computed_bn(b: Builder, x2: str, n: int, c: int, sum_squares: bool = True,
                 axes=(0, 2, 3)) -> str:
    """Keras LayerNormalization of ``[n, c]`` as tf2onnx's FusedBatchNormV3: the rows as the
    channels of ``[1, n, c, 1]``, mean and variance over the other axes."""
    x = b.op("Reshape", [x2, b.const(np.array([1, -1, c, 1], np.int64))], name="bn_view")
    mean = b.op("ReduceMean", [x], name="bn_mean", axes=list(axes), keepdims=1)
    d = b.op("Sub", [x, mean], name="bn_centre")
    if sum_squares:
        sums = b.op("ReduceSumSquare", [d], name="bn_sumsq", axes=list(axes), keepdims=0)
        var = b.op("Div", [sums, b.const(np.array(float(c), np.float32))], name="bn_var")
    else:
        var = b.op("ReduceMean", [b.op("Mul", [d, d], name="bn_sq")], name="bn_var",
                   axes=list(axes), keepdims=0)
    squeezed = b.op("Squeeze", [mean, b.const(np.array(axes, np.int64))], name="bn_squeeze")
    bn = b.op("BatchNormalization", [x, b.const(np.ones(n, np.float32)),
                                     b.const(np.zeros(n, np.float32)), squeezed, var],
              name="bn", epsilon=EPS)
    y = b.op("Reshape", [bn, b.const(np.array([n, c], np.int64))], name="bn_back")
    gamma = b.const((1 + 0.2 * b.rng.standard_normal(c)).astype(np.float32))
    beta = b.const((0.3 * b.rng.standard_normal(c)).astype(np.float32))
    return b.op("Add", [b.op("Mul", [y, gamma], name="bn_gamma"), beta], name="bn_beta")


def byte_classifier():
    """magika's shape: an FC of tokens, a LayerNorm over axis 1 in tf's formula, FCs, a
    max over tokens, a LayerNorm of ``[1, C]`` as a computed-statistics BN, the label FC."""
    b = Builder(seed=3)
    x = b.input("x", [1, T, C])
    h = b.op("MatMul", [x, b.weight(C, H)])
    h = _tf_formula(b, h, [1, T, H], axis=1)
    # tf2onnx's Tensordot: the tokens as rows of a 2-D MatMul, then back
    rows = b.op("Reshape", [h, b.const(np.array([-1, H], np.int64))])
    h = b.op("Reshape", [b.op("MatMul", [rows, b.weight(H, C)]),
                         b.const(np.array([1, T, C], np.int64))])
    h = b.op("Relu", [h])
    pooled = b.op("ReduceMax", [h], axes=[1], keepdims=0)
    normed = _computed_bn(b, pooled, 1, C)
    return b.model([b.op("Softmax", [b.op("MatMul", [normed, b.weight(C, 5, scale=0.1)])], axis=-1)])


def _x(shape, offset: float = 0.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 2 + offset).astype(np.float32)


@pytest.mark.parametrize("offset", [0.0, 40.0])
def test_tf_formula_is_rewritten_within_its_bound(offset):
    b = Builder(seed=1)
    x = b.input("x", [1, T, H])
    model = b.model([_tf_formula(b, x, [1, T, H], axis=1)])
    canonical, rewritten = canonicalized(model)
    assert "tf's batchnorm formula" in canonical.rewritten["ln_out"]
    assert {"ln_scale", "ln_mean_scaled", "ln_x_scaled"} <= set(canonical.merged)
    value = _x((1, T, H), offset)
    [want] = run_ort(model, {"x": value}).values()
    [got] = run_ort(rewritten, {"x": value}).values()
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    gamma, beta = (inits[n].astype(np.float64) for n in ("ln_gamma", "ln_beta"))
    x64 = value.astype(np.float64)
    m = x64.mean(axis=1, keepdims=True)
    s = gamma / np.sqrt(x64.var(axis=1, keepdims=True) + EPS)
    bound = 8 * U * (np.abs(x64 * s) + np.abs(m * s) + np.abs(beta))
    assert np.all(np.abs(got - want) <= bound)


@pytest.mark.parametrize("sum_squares", [True, False])
@pytest.mark.parametrize("offset", [0.0, 40.0])
def test_computed_bn_is_rewritten_within_its_bound(sum_squares, offset):
    b = Builder(seed=2)
    x = b.input("x", [3, C])
    model = b.model([_computed_bn(b, x, 3, C, sum_squares)])
    canonical, rewritten = canonicalized(model)
    assert "statistics computed over axes [2]" in canonical.rewritten["bn"]
    assert "BatchNormalization" not in [n.op for n in canonical.graph.nodes]
    value = _x((3, C), offset)
    [want] = run_ort(model, {"x": value}).values()
    [got] = run_ort(rewritten, {"x": value}).values()
    x64 = value.astype(np.float64)
    a = 1 / np.sqrt(x64.var(axis=1, keepdims=True) + EPS)
    big = np.abs(x64).max(axis=1, keepdims=True)
    gamma_beta = [n for n in canonical.graph.nodes if n.name in ("bn_gamma", "bn_beta")]
    assert len(gamma_beta) == 2   # the model's own scale and shift after the norm stay
    # the BN's own scale is ones and its bias zeros: the bound's |bias| term is 0, and gamma's
    # Mul after it is the same node in both models
    gamma = np.abs(np.asarray(gamma_beta[0].inputs[1].values, np.float64))
    bound = (4 * C + 30) * U * big * a * gamma + 2 * U * np.abs(want)
    assert np.all(np.abs(got - want) <= bound)


def test_byte_classifier_runs_whole_on_the_accelerator(tmp_path):
    """Cut into three Mrvl subgraphs before (the outer product r * gamma, the BN with computed
    statistics and its 3-axis ReduceMean on CPU); one after, and verify passes."""
    model = byte_classifier()
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    canonical, rewritten = canonicalized(model)
    assert {"ln_out", "bn"} <= set(canonical.rewritten)
    feeds = [{"x": _x((1, T, C), 3.0, seed=k)} for k in range(3)]
    for feed in feeds:
        [want] = run_ort(model, feed).values()
        [got] = run_ort(rewritten, feed).values()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert mrvl_convert.compare(model, result.out_dir, feeds).passed


def test_trained_bn_and_other_axes_are_left_alone():
    b = Builder(seed=4)
    x = b.input("x", [1, 4, 6, 6])
    y = b.bn(x, 4)   # constant statistics: a trained BN, not a norm
    mean = b.op("ReduceMean", [y], name="m", axes=[2, 3], keepdims=1)   # not every axis but 1
    d = b.op("Sub", [y, mean])
    var = b.op("ReduceMean", [b.op("Mul", [d, d])], axes=[2, 3], keepdims=0)
    squeezed = b.op("Squeeze", [mean, b.const(np.array([2, 3], np.int64))])
    out = b.op("BatchNormalization", [y, b.const(np.ones([1, 4], np.float32).reshape(4)),
                                      b.const(np.zeros(4, np.float32)),
                                      b.op("ReduceMean", [squeezed], axes=[0], keepdims=0),
                                      b.op("ReduceMean", [var], axes=[0], keepdims=0)],
               name="odd_bn", epsilon=EPS)
    canonical, _ = canonicalized(b.model([out]))
    assert not any("norm_forms" in why for why in canonical.rewritten.values())
    assert [n.op for n in canonical.graph.nodes].count("BatchNormalization") == 2


def test_int8_byte_classifier_runs_whole_on_the_accelerator(tmp_path):
    """Our int8 recipe gives each reader of x its own DequantizeLinear: the norm's mean and
    its ``x * s`` read two copies of one value, recognised as one (3 / 2 on integ10)."""
    model = byte_classifier()
    calibration = {"x": np.concatenate([_x((1, T, C), 3.0, seed=k) for k in range(8)])}
    result = mrvl_convert.convert(model, tmp_path / "o",
                                  quantize=Quantization(calibration, "minmax"))
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    qdq = tmp_path / "o" / result.manifest["quantization"]["file"]
    feeds = [{"x": _x((1, T, C), 3.0, seed=20 + k)} for k in range(3)]
    # The norms now run as fp16 layers inside the int8 region; a value they round across an
    # int8 step of the output's QuantizeLinear moves one step (1/127 of a probability): no
    # more than the QDQ model computed with each float tensor rounded to fp16 moves.
    [row] = [r for r in mrvl_convert.compare(qdq, result.out_dir, feeds).rows
             if r.kind == "output"]
    assert row.max_abs <= row.floor_max_abs
