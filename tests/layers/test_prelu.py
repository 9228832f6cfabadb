"""PRelu on layer set marvell (issue 17): the codegen has no PRelu layer (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc has
CreateCompositeMrvlActivationLayer's LeakyRelu with one alpha only), so layers/_decompose.py
lowers it to Relu(x) - slope * Relu(-x): Relu, Mul2D(x, -1) + Relu, Mul2D(slope), Sub.
Bound: exact for x >= 0; fp16(fp16(slope) * x) for x < 0 (two roundings)."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.layers import UPSTREAM
from support.layer_chains import SHAPE, front_conv, layer_kinds, run_chain
from support.models import Builder, run_ort
from support.onnxref import U

SLOPES = {
    "per_channel": np.array([0.25, -0.5, 3.0, 0.1], np.float32).reshape(4, 1, 1),
    "scalar": np.array([0.2], np.float32),
    "full": np.random.default_rng(7).uniform(-2, 2, SHAPE[1:]).astype(np.float32),
}


def _prelu_model(slope: np.ndarray, shape=SHAPE):
    b = Builder()
    return b.model([b.op("PRelu", [front_conv(b, shape), b.const(slope)], name="prelu")])


def _assert_prelu_bound(xin, got, want):
    """x >= 0: exact; x < 0: two roundings (fp16 slope, product) of |slope * x|."""
    positive = xin >= 0
    np.testing.assert_array_equal(got[positive], want[positive])
    err = np.abs(got.astype(np.float64) - want)[~positive]
    assert np.all(err <= 2 * U * np.abs(want[~positive]) * 1.0001 + 1e-30)


@pytest.mark.parametrize("kind", sorted(SLOPES))
def test_prelu_lowers_to_relu_mul_mul_sub(tmp_path, kind):
    model = _prelu_model(SLOPES[kind])
    result, xin, got, want = run_chain(model, tmp_path)
    assert layer_kinds(result) == ["Conv2D", "Relu", "Mul2D", "Mul2D", "Sub"]
    assert result.placement("prelu")["rule"] == "mrvl.prelu"
    assert result.summary["cpu_nodes"] == 0
    _assert_prelu_bound(xin, got, want)
    compared = mrvl_convert.compare(model, result.out_dir, layers=True)
    assert compared.first_layer_over is None


def test_prelu_chain_attributes(tmp_path):
    """What the codegen's writers give each layer of the chain (Mul2D and Sub: R4,
    CreateCompositeMrvlMulLayer / CreateCompositeMrvlSubtractLayer)."""
    result = mrvl_convert.convert(_prelu_model(SLOPES["per_channel"]), tmp_path / "o")
    doc = json.loads(next(p for p in result.files if p.name.endswith("-nodes.json")).read_text())
    layers = [n for n in doc["nodes"] if n["op"] == "tvm_op"
              and n["attrs"]["layer_name"] != ["layout_transform"]][-4:]
    assert [n["attrs"]["layer_name"] for n in layers] == [["Relu"], ["Mul2D"], ["Mul2D"], ["Sub"]]
    assert [n["attrs"]["source_nodes"] for n in layers] == [[], [], [], ["prelu"]]
    assert {n["attrs"]["composite_name"][0] for n in layers} == {"mrvl.prelu"}
    negate, scale, sub = layers[1]["attrs"], layers[2]["attrs"], layers[3]["attrs"]
    assert negate["activation_type"] == ["relu"]
    assert "activation_type" not in scale or scale["activation_type"] != ["relu"]
    assert scale["input_const_shape"] == ["1", "1", "1", "4"]      # NHWC, per channel
    assert sub["data_layout_shape_0"] == sub["data_layout_shape_1"] == ["1", "6", "7", "4"]
    consts = json.loads(next(p for p in result.files
                             if p.name.endswith("-consts.json")).read_text())
    value = np.frombuffer(base64.b64decode(consts[scale["input_const_name"][0]]["data_base64"]),
                          np.float32)
    np.testing.assert_array_equal(value, SLOPES["per_channel"].reshape(-1))


def test_the_identity_is_exact_in_float32_on_onnxruntime():
    """Relu(x) - slope * Relu(-x) and PRelu agree bit for bit in float32 (x < 0: s * (-x) rounds
    as -(s * x); x >= 0: x - 0)."""
    slope = SLOPES["per_channel"]
    b = Builder()
    x = b.input("x", SHAPE)
    s = b.const(slope)
    neg = b.op("Relu", [b.op("Neg", [x])])
    rewritten = b.model([b.op("Sub", [b.op("Relu", [x]), b.op("Mul", [neg, s])])])
    b = Builder()
    original = b.model([b.op("PRelu", [b.input("x", SHAPE), b.const(slope)])])
    feed = {"x": np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32) * 8}
    [want] = run_ort(original, feed).values()
    [got] = run_ort(rewritten, feed).values()
    np.testing.assert_array_equal(got, want)


def test_prelu_left_on_cpu_says_why(tmp_path):
    two = Builder()
    # a batch 2 that is not the model's (rules/batch_axis.py: no runs in chunks of 1)
    xb = two.op("Concat", [two.input("x", [1, 4, 6, 7])] * 2, axis=0)
    batch2 = two.model([two.op("PRelu", [_front_of(two, xb), two.const(SLOPES["scalar"])],
                               name="b2")])
    reason = mrvl_convert.convert(batch2, tmp_path / "b").placement("b2")["reason"]
    assert reason == "mrvl.prelu: Mul2D takes batch 1; this one has batch 2"
    b = Builder()
    x = b.input("x", [1, 4, 6, 7])
    slope = b.input("s", [4, 1, 1])
    runtime = b.model([b.op("PRelu", [_front_of(b, x), slope], name="rt")])
    reason = mrvl_convert.convert(runtime, tmp_path / "c").placement("rt")["reason"]
    assert reason.startswith("mrvl.prelu: the slope (s) is computed at run time")
    upstream = mrvl_convert.convert(_prelu_model(SLOPES["scalar"]), tmp_path / "u",
                                    layer_set=UPSTREAM).placement("prelu")
    assert upstream["reason"] == ("no rule handles op type PRelu; layer set marvell would take "
                                  "it (mrvl.prelu)")


def _front_of(b: Builder, x: str) -> str:
    eye = np.eye(4, dtype=np.float32).reshape(4, 4, 1, 1)
    return b.op("Conv", [x, b.const(eye)], kernel_shape=[1, 1])


def test_prelu_of_fp16_inputs_in_a_real_chain(tmp_path):
    """Conv -> PRelu -> Conv (random weights): the hybrid within the default tolerance."""
    b = Builder(seed=4)
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("PRelu", [b.conv(x, 3, 4, pads=[1, 1, 1, 1]), b.const(SLOPES["per_channel"])],
             name="prelu")
    model = b.model([b.conv(y, 4, 5, pads=[1, 1, 1, 1])])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert result.summary["cpu_nodes"] == 0 and result.summary["mrvl_subgraphs"] == 1
    assert mrvl_convert.compare(model, result.out_dir, samples=2).passed
