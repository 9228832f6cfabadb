"""The Conv2D forms real networks need: grouped convolutions, per-channel affines (standalone
BatchNormalization, per-channel Mul/Add, alone or after a Conv) and channel shuffles. Each is
converted, placed on the accelerator, and run end to end against onnxruntime on the original."""
from __future__ import annotations

import json

import numpy as np
import pytest

import mrvl_convert
from support.models import Builder, run_ort

RNG = np.random.default_rng(7)


def _run(model, tmp_path, x):
    result = mrvl_convert.convert(model, tmp_path / "out")
    [got] = mrvl_convert.HybridSession(str(tmp_path / "out")).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    # The fp16 tolerance the comparison uses by default: max error within 1% of max |want|.
    assert np.max(np.abs(got - want)) <= 1e-2 * np.max(np.abs(want)), "hybrid != onnxruntime"
    return result


def _layers(result):
    found = []
    for stage in result.manifest["stages"]:
        if stage["kind"] == "mrvl":
            doc = json.loads((result.out_dir / stage["nodes_json"]).read_text())
            found += [n["attrs"] for n in doc["nodes"] if n["op"] == "tvm_op"]
    return found


def _stages(result):
    return [s["kind"] for s in result.manifest["stages"]]


@pytest.mark.parametrize("groups", [2, 4])
def test_grouped_conv_runs_on_mrvl_and_matches(tmp_path, groups):
    b = Builder(seed=groups)
    x = b.input("x", [1, 8, 6, 6])
    y = b.op("Relu", [b.conv(x, 8, 12, group=groups, pads=[1, 1, 1, 1])])
    result = _run(b.model([y]), tmp_path, RNG.standard_normal((1, 8, 6, 6)).astype(np.float32))
    assert _stages(result) == ["mrvl"]


def test_standalone_bn_relu_conv_is_one_mrvl_stage(tmp_path):
    """DenseNet's pre-activation: BatchNormalization -> Relu -> Conv after a Concat."""
    b = Builder(seed=1)
    x = b.input("x", [1, 4, 6, 6])
    c1 = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
    cat = b.op("Concat", [x, c1], axis=1)
    y = b.op("Relu", [b.bn(cat, 8)], name="pre_act")
    y = b.conv(y, 8, 4, k=1)
    result = _run(b.model([y]), tmp_path, RNG.standard_normal((1, 4, 6, 6)).astype(np.float32))
    assert _stages(result) == ["mrvl"]
    affine = [a for a in _layers(result) if a["rule"] == ["mrvl.channel_affine"]]
    assert len(affine) == 1 and affine[0]["groups"] == ["8"]
    assert affine[0]["activation_type"] == ["relu"]


def test_per_channel_mul_add_after_conv_is_folded(tmp_path):
    """Inception-v2 as exported: Conv -> Mul(per-channel) -> Add(per-channel) -> Relu."""
    b = Builder(seed=2)
    x = b.input("x", [1, 3, 8, 8])
    y = b.conv(x, 3, 6, bias=False, pads=[1, 1, 1, 1])
    y = b.op("Mul", [y, b.const((1 + 0.2 * RNG.standard_normal((6, 1, 1))).astype(np.float32))])
    y = b.op("Add", [y, b.const((0.1 * RNG.standard_normal((1, 6, 1, 1))).astype(np.float32))])
    y = b.op("Relu", [y])
    result = _run(b.model([y]), tmp_path, RNG.standard_normal((1, 3, 8, 8)).astype(np.float32))
    (conv,) = [a for a in _layers(result) if a["layer_name"] == ["Conv2D"]]
    assert len(conv["source_nodes"]) == 4


def test_standalone_per_channel_mul_is_a_depthwise_layer(tmp_path):
    b = Builder(seed=3)
    x = b.input("x", [1, 5, 4, 4])
    y = b.op("Mul", [x, b.const((0.5 + RNG.random((1, 5, 1, 1))).astype(np.float32))])
    y = b.conv(y, 5, 5, k=1)
    result = _run(b.model([y]), tmp_path, RNG.standard_normal((1, 5, 4, 4)).astype(np.float32))
    assert _stages(result) == ["mrvl"]
    assert [a["rule"][0] for a in _layers(result)].count("mrvl.channel_affine") == 1


def test_mul_by_a_spatial_constant_is_not_an_affine(tmp_path):
    b = Builder(seed=4)
    x = b.input("x", [1, 2, 3, 3])
    y = b.op("Mul", [x, b.const(RNG.random((1, 1, 3, 3)).astype(np.float32))], name="spatial")
    model = b.model([b.conv(y, 2, 2, k=1)])
    result = mrvl_convert.convert(model, tmp_path / "out", layer_set="upstream-0.19")
    entry = result.placement("spatial")
    assert entry["placement"] == "cpu"
    assert "not a per-channel affine" in entry["reason"]
    # The newer set has an elementwise product layer for it.
    newer = mrvl_convert.convert(model, tmp_path / "newer").placement("spatial")
    assert newer["placement"] == "mrvl" and newer["rule"] == "mrvl.mul"


@pytest.mark.parametrize("groups", [2, 3])
def test_channel_shuffle_is_one_exact_permutation_layer(tmp_path, groups):
    """ShuffleNet's Reshape -> Transpose -> Reshape between two convs stays on Mrvl, and the
    permutation itself is exact (the layer's output equals the original's data movement)."""
    c = 2 * groups
    b = Builder(seed=5)
    x = b.input("x", [1, c, 4, 4])
    y = b.conv(x, c, c, k=1, group=groups)
    y = b.op("Reshape", [y, b.const(np.array([1, groups, c // groups, 4, 4], np.int64))])
    y = b.op("Transpose", [y], perm=[0, 2, 1, 3, 4])
    y = b.op("Reshape", [y, b.const(np.array([1, c, 4, 4], np.int64))], name="merge")
    y = b.conv(y, c, c, k=1)
    result = _run(b.model([y]), tmp_path, RNG.standard_normal((1, c, 4, 4)).astype(np.float32))
    assert _stages(result) == ["mrvl"]
    assert "mrvl.channel_shuffle" in [a["rule"][0] for a in _layers(result)]


def test_channel_shuffle_alone_is_bit_exact(tmp_path):
    from mrvl_convert.kernels.fp16 import round_to_fp16
    b = Builder(seed=6)
    x = b.input("x", [1, 6, 3, 3])
    y = b.conv(x, 6, 6, k=1)
    y = b.op("Reshape", [y, b.const(np.array([1, 3, 2, 3, 3], np.int64))])
    y = b.op("Transpose", [y], perm=[0, 2, 1, 3, 4])
    y = b.op("Reshape", [y, b.const(np.array([1, 6, 3, 3], np.int64))])
    model = b.model([y])
    mrvl_convert.convert(model, tmp_path / "out")
    session = mrvl_convert.HybridSession(str(tmp_path / "out"))
    xv = RNG.standard_normal((1, 6, 3, 3)).astype(np.float32)
    _, layers = session.run_layers({"x": xv})
    convs = [layer.value.transpose(0, 3, 1, 2) for layer in layers
             if layer.spec.layer_name == "Conv2D"]            # NHWC -> NCHW
    conv_out, shuffled = convs
    want = conv_out.reshape(1, 3, 2, 3, 3).transpose(0, 2, 1, 3, 4).reshape(1, 6, 3, 3)
    np.testing.assert_array_equal(shuffled, round_to_fp16(want)[0])
