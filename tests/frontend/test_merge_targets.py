"""Merged nodes followed to a node that exists (issue 45, ICLabelNet int8: an INTERNAL ERROR
KeyError in ``emit/documents.py``). ``space_to_batch.py`` merged the int8 model's Q/DQ pair
after the first Conv's LeakyRelu into a copy it added; the second Conv's rewrite re-quantized
the float output itself, the cleanup dropped that copy, and the report followed the merge to a
node no stage holds. ``merge_targets.settle_merges`` follows every merge to the final graph."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.frontend.merge_targets import settle_merges
from support.int8 import converted_int8


def _batch_of_rows(batch: int = 4, width: int = 20, chans=(1, 8, 8, 1)) -> onnx.ModelProto:
    """ICLabelNet's autocorrelation branch, small: [B, 1, 1, W] through 1x3 Convs and
    LeakyRelus (each a space-to-batch Conv to the rewrite), then a Transpose. The rows come
    from a [1, 1, B, W] image by a Reshape, a SpaceToBatch of block Bx1 as a data movement: a
    chain of Q/DQ pairs alone is no SpaceToBatch (ICLabelNet's own batch is not rewritten)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([batch, 1, 1, width], np.int64), "rows")]
    nodes, x = [helper.make_node("Reshape", ["x", "rows"], ["xr"], "space_to_batch")], "xr"
    for i, (c, o) in enumerate(zip(chans, chans[1:])):
        inits += [numpy_helper.from_array(
            rng.uniform(-.5, .5, (o, c, 1, 3)).astype(np.float32), f"w{i}"),
            numpy_helper.from_array(rng.uniform(-.1, .1, o).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], f"conv{i}",
                                   kernel_shape=[1, 3], pads=[0, 1, 0, 1]),
                  helper.make_node("LeakyRelu", [f"c{i}"], [f"r{i}"], f"relu{i}", alpha=0.2)]
        x = f"r{i}"
    nodes.append(helper.make_node("Transpose", [x], ["y"], "t", perm=[3, 2, 1, 0]))
    graph = helper.make_graph(
        nodes, "rows", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                      [1, 1, batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_an_int8_chain_of_space_to_batch_convs_converts_and_verifies(tmp_path):
    result, qdq = converted_int8(_batch_of_rows(), tmp_path / "art")
    entries = {e["name"]: e for e in result.report["nodes"]}
    merged = [e for e in entries.values() if "merged_into" in e]
    assert merged, "the Q/DQ pairs after the first LeakyRelu are merged into a Conv"
    stages = {s["name"] for s in result.manifest["stages"]}
    assert all(e["stage"] in stages for e in merged), merged
    feeds = [{"x": x} for x in np.random.default_rng(5).uniform(
        -1, 1, (3, 1, 1, 4, 20)).astype(np.float32)]
    assert mrvl_convert.compare(qdq, result.out_dir, feeds).passed


def test_a_merge_is_followed_through_chains_and_gone_added_nodes():
    merged = {"q": "q_copy", "a": "b", "b": "c", "lost": "nowhere", "loop": "loop2",
              "loop2": "loop"}
    derived = {"q_copy": "conv", "nowhere_parent": "x"}
    out, removed = settle_merges(merged, derived, {"conv", "c"})
    assert out == {"q": "conv", "a": "c", "b": "c"}
    assert set(removed) == {"lost", "loop", "loop2"}
    assert "nowhere" in removed["lost"]
