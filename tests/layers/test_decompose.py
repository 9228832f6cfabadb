"""Decompositions of layer set marvell (issue 17): ops the newer codegen has no layer for become
chains of its layers, each compared with onnxruntime within an fp16 bound.

- SiLU / Swish ``x * Sigmoid(x)``: a Sigmoid layer and a Mul2D, one per node (no rewrite).
- ``HardSwish`` and ``HardSigmoid``: a lowering emits Mul2D(alpha) -> Sum2D(beta) -> Clip(0, 1)
  [-> Mul2D(x, gate)] (layers/_decompose.py): not a canonical rewrite, because the chain does not
  round as onnxruntime's op does, so it only happens on the accelerator.
- ``x * Clip(x + 3, 0, 6) / 6``: Sum2D, Clip, Mul2D, and the Div by 6 as a Mul2D by fp16(1/6).
- ``Div`` by a constant: Mul2D by the reciprocal (at most 2**-11 relative in fp16(1/c), then the
  product's rounding).
- squeeze-excite ``x * g``, g of shape [N, C, 1, 1]: one Mul2D broadcasting g (the newer mrvl.py
  takes a broadcasting multiply).

Bounds: ``onnxref.fp16_bound(magnitude, roundings)``, with the magnitude of the terms each
rounding touches and one rounding per fp16 constant and per layer output on the path.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.layers import UPSTREAM
from support.layer_chains import front_conv, layer_kinds, run_chain
from support.models import Builder
from support.onnxref import U, assert_close_fp16


def _gate_bound(x: np.ndarray) -> np.ndarray:
    """Magnitude of the terms of HardSigmoid's chain: alpha * |x| + beta, each rounded."""
    return np.abs(x) / 6.0 + 0.5


@pytest.mark.parametrize("seed", [0, 1])
def test_silu_is_sigmoid_and_mul2d(tmp_path, seed):
    b = Builder()
    x = front_conv(b)
    model = b.model([b.op("Mul", [x, b.op("Sigmoid", [x])])])
    result, xin, got, want = run_chain(model, tmp_path, seed=seed)
    assert layer_kinds(result) == ["Conv2D", "Sigmoid", "Mul2D"]
    assert result.summary["cpu_nodes"] == 0
    # Sigmoid: one rounding of s; the product: one more, of |x| * s.
    assert_close_fp16(got, want, want, roundings=2)


@pytest.mark.parametrize("seed", [0, 1])
def test_hardswish_op_lowers_to_mul_sum_clip_mul(tmp_path, seed):
    b = Builder(opset=14)
    model = b.model([b.op("HardSwish", [front_conv(b)], name="hs")])
    result, xin, got, want = run_chain(model, tmp_path, seed=seed)
    assert layer_kinds(result) == ["Conv2D", "Mul2D", "Sum2D", "Clip", "Mul2D"]
    assert result.placement("hs")["rule"] == "mrvl.hardswish"
    # The gate: fp16(1/6), the product, the sum (3 roundings of |x|/6 + 1/2); then x * gate.
    assert_close_fp16(got, want, np.abs(xin) * _gate_bound(xin), roundings=4)
    compared = mrvl_convert.compare(model, result.out_dir, layers=True)
    assert compared.first_layer_over is None


@pytest.mark.parametrize("alpha,beta", [(0.2, 0.5), (1.0 / 6.0, 0.5), (0.3, 0.25)])
def test_hardsigmoid_lowers_to_mul_sum_clip(tmp_path, alpha, beta):
    b = Builder()
    model = b.model([b.op("HardSigmoid", [front_conv(b)], name="hsig", alpha=alpha, beta=beta)])
    result, xin, got, want = run_chain(model, tmp_path)
    assert layer_kinds(result) == ["Conv2D", "Mul2D", "Sum2D", "Clip"]
    layers = [n for n in json.loads(next(p for p in result.files if p.name.endswith(
        "-nodes.json")).read_text())["nodes"]
              if n["op"] == "tvm_op" and n["attrs"]["layer_name"] != ["layout_transform"]]
    # Only the last layer of the chain stands for the node (the per-layer comparison's tensor).
    assert [n["attrs"]["source_nodes"] for n in layers[-3:]] == [[], [], ["hsig"]]
    assert_close_fp16(got, want, alpha * np.abs(xin) + beta, roundings=3)


def test_exporters_hardswish_is_sum_clip_mul_mul(tmp_path):
    """x * Clip(x + 3, 0, 6) / 6 as Paddle and older PyTorch write it."""
    b = Builder()
    x = front_conv(b)
    gate = b.op("Clip", [b.op("Add", [x, b.const(np.array(3, np.float32))]),
                         b.const(np.array(0, np.float32)), b.const(np.array(6, np.float32))])
    model = b.model([b.op("Div", [b.op("Mul", [x, gate]), b.const(np.array(6, np.float32))],
                          name="div6")])
    result, xin, got, want = run_chain(model, tmp_path)
    assert layer_kinds(result) == ["Conv2D", "Sum2D", "Clip", "Mul2D", "Mul2D"]
    assert result.summary["cpu_nodes"] == 0
    assert "not exact" in result.placement("div6")["canonical"]   # CPU would keep the Div
    magnitude = np.abs(xin) * (np.abs(xin) + 3) / 6
    assert_close_fp16(got, want, magnitude, roundings=4)
    upstream = mrvl_convert.convert(model, tmp_path / "u", layer_set=UPSTREAM)
    assert upstream.placement("div6")["reason"].endswith(
        "layer set marvell would take it (mrvl.div_const)")


@pytest.mark.parametrize("divisor", [0.229, 3.0, -7.5])
def test_div_by_a_constant_is_mul2d_by_the_reciprocal(tmp_path, divisor):
    b = Builder()
    model = b.model([b.op("Div", [front_conv(b), b.const(np.array(divisor, np.float32))],
                          name="div")])
    result, xin, got, want = run_chain(model, tmp_path)
    assert layer_kinds(result) == ["Conv2D", "Mul2D"]
    assert result.placement("div")["rule"] == "mrvl.div_const"
    # x is fp16 already: fp16(1/c) and the product's rounding, 2 * 2**-11 relative.
    assert_close_fp16(got, want, want, roundings=2)
    assert np.all(np.abs(got - want) <= 2 * U * np.abs(want) * 1.0001 + 1e-30)


def test_per_channel_divisor_and_zero_divisor(tmp_path):
    b = Builder()
    c = np.array([0.5, 0.229, 0.224, 3.0], np.float32).reshape(1, 4, 1, 1)
    model = b.model([b.op("Div", [front_conv(b), b.const(c)], name="div")])
    result, xin, got, want = run_chain(model, tmp_path)
    assert layer_kinds(result) == ["Conv2D", "Mul2D"]
    assert_close_fp16(got, want, want, roundings=2)
    b = Builder()
    zero = b.model([b.op("Div", [front_conv(b), b.const(np.array(0, np.float32))], name="div")])
    entry = mrvl_convert.convert(zero, tmp_path / "z").placement("div")
    assert entry["placement"] == "cpu" and "infinite" in entry["reason"]


@pytest.mark.parametrize("seed", [0, 1])
def test_squeeze_excite_gate_is_one_broadcasting_mul2d(tmp_path, seed):
    b = Builder(seed)
    x = b.op("Relu", [front_conv(b)])
    g = b.op("GlobalAveragePool", [x])
    g = b.op("Relu", [b.conv(g, 4, 8, k=1)])
    g = b.op("HardSigmoid", [b.conv(g, 8, 4, k=1)], alpha=1.0 / 6.0, beta=0.5)
    model = b.model([b.op("Mul", [x, g], name="excite")])
    result, xin, got, want = run_chain(model, tmp_path, seed=seed)
    kinds = layer_kinds(result)
    assert kinds[-1] == "Mul2D" and result.summary["cpu_nodes"] == 0
    assert result.summary["mrvl_subgraphs"] == 1
    # The gate (two 1x1 convolutions of a mean, then the HardSigmoid chain) is within a few
    # fp16 roundings of its value in [0, 1]; the product adds one.
    rel = np.abs(got - want) / np.maximum(np.abs(xin), 1e-3)
    assert float(rel.max()) <= 16 * U


def test_upstream_keeps_decomposed_ops_on_cpu_and_says_why(tmp_path):
    b = Builder(opset=14)
    x = front_conv(b)
    y = b.op("HardSwish", [x], name="hs")
    model = b.model([b.op("Mul", [y, b.op("Sigmoid", [y], name="sig")], name="swish")])
    result = mrvl_convert.convert(model, tmp_path / "u", layer_set=UPSTREAM)
    for name, rule in (("hs", "mrvl.hardswish"), ("sig", "mrvl.sigmoid")):
        entry = result.placement(name)
        assert entry["placement"] == "cpu"
        assert entry["reason"].endswith(f"; layer set marvell would take it ({rule})")
