"""Max and Min of n >= 2 activations of one shape run on the accelerator as Concat, reshape and
Maxpool2D (1, n) (Min negated around it), ``layers/_max_pairs.py``: bit-equal to onnxruntime.
Before, two operands were ``o + Relu(f - o)`` (``_minmax.py``: the gap rounded to fp16, a step
off where the operands differ in magnitude) and three stayed on CPU ("Max has 3 operands").

The operands are exact copies or channel permutations of an fp16 input (identity and
permutation 1x1 Convs), so everything before the Max is exact and any difference is the Max's."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from support.layer_chains import SHAPE, front_conv, layer_kinds
from support.models import Builder, run_ort
from support.onnxref import fp16_round

PERMS = ([2, 0, 3, 1], [3, 2, 1, 0])


def _permuted(b: Builder, source: str, perm, channels: int = SHAPE[1], rank: int = 4) -> str:
    w = np.eye(channels, dtype=np.float32)[perm].reshape([channels, channels] + [1] * (rank - 2))
    return b.op("Conv", [source, b.const(w)], kernel_shape=[1] * (rank - 2))


def _image_model(op: str, n: int):
    b = Builder()
    f = front_conv(b)
    operands = [f] + [_permuted(b, f, p) for p in PERMS[:n - 1]]
    return b.model([b.op(op, operands, name="pair")])


def _run(model, tmp_path, shape=SHAPE):
    # magnitudes far apart: o + Relu(f - o) would round the gap
    x = fp16_round(np.random.default_rng(3).standard_normal(shape)
                   * np.exp(np.random.default_rng(4).uniform(-6, 6, shape)))
    result = mrvl_convert.convert(model, tmp_path / "o")
    [got] = HybridSession(result.out_dir, threads=1).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    return result, got, want


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("n", [2, 3])
def test_max_min_of_image_activations_is_one_stage_and_bit_exact(tmp_path, op, n):
    model = _image_model(op, n)
    result, got, want = _run(model, tmp_path)
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    kinds = layer_kinds(result)
    assert "Maxpool2D" in kinds and "Sub" not in kinds and "Sum2D" not in kinds, kinds
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _stack_model(keepdims: int):
    """attacut's branches: three Conv1d outputs [1, C, L] transposed to [1, L, C], stacked on a
    new last axis and reduced by ReduceMax over it, then an FC."""
    b = Builder(opset=13)
    c, length = 4, 9
    x = b.input("x", [1, c, length])
    front = _permuted(b, x, list(range(c)), c, rank=3)
    branches = [_permuted(b, front, p, c, rank=3) for p in ([0, 1, 2, 3],) + PERMS]
    stacked = b.op("Concat", [b.op("Unsqueeze", [b.op("Transpose", [t], perm=[0, 2, 1]),
                                                 b.const(np.array([3], np.int64))])
                              for t in branches], axis=3)
    reduced = b.op("ReduceMax", [stacked], axes=[3], keepdims=keepdims)
    if keepdims:
        reduced = b.op("Reshape", [reduced, b.const(np.array([1, length, c], np.int64))])
    return b.model([reduced]), [1, c, length]


@pytest.mark.parametrize("keepdims", [0, 1])
def test_stacked_reduce_max_is_one_exact_pool(tmp_path, keepdims):
    model, shape = _stack_model(keepdims)
    result, got, want = _run(model, tmp_path, shape)
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    kinds = layer_kinds(result)
    assert kinds.count("Maxpool2D") == 1 and "Sum2D" not in kinds, kinds
    np.testing.assert_array_equal(got, want)


def test_max_of_feature_vectors_is_exact(tmp_path):
    """2-D operands [1, C] (two Gemms) are viewed as [1, 1, 1, C] by reshapes."""
    b = Builder()
    x = b.input("x", [1, 6])
    eye = np.eye(6, dtype=np.float32)
    f = b.op("Gemm", [x, b.const(eye)])
    o = b.op("Gemm", [x, b.const(eye[:, ::-1].copy())])
    model = b.model([b.op("Min", [f, o], name="pair")])
    result, got, want = _run(model, tmp_path, [1, 6])
    assert "Maxpool2D" in layer_kinds(result)
    np.testing.assert_array_equal(got, want)
