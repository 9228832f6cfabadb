"""A norm's mean over several axes as one-axis means in turn (frontend/norm_means.py): Keras'
LayerNormalization(axis=[1, 2, 3]) of a feature map, within the stated float32 bound on
onnxruntime, and the model whole on the accelerator (its 3-axis means cut it on integ10)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import mrvl_convert
from support.models import Builder, canonicalized, run_ort

U = 2.0 ** -24
SHAPE = [1, 4, 6, 5]


def _layer_norm(axes, shape=SHAPE):
    b = Builder(seed=1)
    x = b.input("x", shape)
    h = b.conv(x, shape[1], shape[1], k=1)
    m = b.op("ReduceMean", [h], name="mean", axes=axes, keepdims=1)
    d = b.op("Sub", [h, m], name="centre")
    v = b.op("ReduceMean", [b.op("Mul", [d, d], name="square")], name="var", axes=axes,
             keepdims=1)
    r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [v, b.const(np.float32(1e-3))])])])
    return b.model([b.conv(b.op("Mul", [d, r], name="normed"), shape[1], shape[1], k=1)]), h


def _with_outputs(proto, names):
    for name in names:
        proto.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return proto


@pytest.mark.parametrize("offset", [0.0, 30.0])
def test_means_in_turn_within_the_bound(offset):
    model, h = _layer_norm([1, 2, 3])
    canonical, rewritten = canonicalized(model)
    assert "[[2, 3], [1]]" in canonical.rewritten["mean"]
    assert "[[2, 3], [1]]" in canonical.rewritten["var"]
    x = (np.random.default_rng(0).standard_normal(SHAPE) * 2 + offset).astype(np.float32)
    stats = [h, "mean_out", "var_out"]
    want = run_ort(_with_outputs(model, stats), {"x": x})
    got = run_ort(_with_outputs(rewritten, stats[1:]), {"x": x})
    bound = (4 * 6 * 5 + 4 + 6 + 5) * U   # (C + sum n_i) u mean|x|
    mean_abs = np.abs(want[h]).mean(axis=(1, 2, 3), keepdims=True)
    assert np.all(np.abs(got["mean_out"] - want["mean_out"]) <= bound * mean_abs)
    # the variance's x is d * d: its mean|x| is the variance (d's own error is shared: the
    # centred tensor is the model's Sub of the same mean node, now computed in turn)
    var_bound = bound * want["var_out"] + 2 * np.abs(got["mean_out"] - want["mean_out"]) * \
        np.sqrt(want["var_out"])
    assert np.all(np.abs(got["var_out"] - want["var_out"]) <= var_bound)


def test_layer_norm_over_three_axes_runs_whole_on_the_accelerator(tmp_path):
    model, _ = _layer_norm([1, 2, 3])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    feeds = [{"x": np.random.default_rng(k).standard_normal(SHAPE).astype(np.float32)}
             for k in range(2)]
    assert mrvl_convert.compare(model, result.out_dir, feeds).passed


@pytest.mark.parametrize("axes", [[1], [2, 3], [1, 3]])
def test_split_only_where_one_reduce_layer_cannot_take_the_axes(axes):
    model, _ = _layer_norm(axes)
    canonical, _ = canonicalized(model)
    split = [k for k, v in canonical.rewritten.items() if "norm_means" in v]
    assert split == ([] if axes != [1, 3] else ["mean", "var"])
