"""``frontend/step_heads.py`` alone: the views of a batch-1 tensor that lay it out time-major
(``[T, D, 1, k]`` -> Transpose of the unit axis -> ``[T, 1, D k]`` or ``[T, D k]``) remade as
``Squeeze(0)`` of one Reshape of it, and a per-step Gemm as MatMul + Add. onnxruntime runs the
graph before and after: the views bit-equal, the Gemm within the module's bound."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.step_heads import is_view, lift_step_heads
from support.recurrent import U, run

T, D, K, C = 30, 2, 6, 5


def _views_model(head: str) -> onnx.ModelProto:
    """``joined`` [1, T D K, 1, 1] (an unrolled cell's steps) -> Y [T, D, 1, K] -> the head."""
    rng = np.random.default_rng(3)
    inits = {"yshape": np.array([T, D, 1, K]), "fshape": np.array(
        [T, D * K] if head == "gemm" else [T, 1, D * K]),
        "w": rng.standard_normal((D * K, C)), "wt": rng.standard_normal((C, D * K)),
        "b": rng.standard_normal(C)}
    nodes = [helper.make_node("Reshape", ["joined", "yshape"], ["Y"], name="as_y"),
             helper.make_node("Transpose", ["Y"], ["Yt"], name="dirs_last", perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["Yt", "fshape"], ["feat"], name="join_dirs")]
    if head == "gemm":
        nodes.append(helper.make_node("Gemm", ["feat", "wt", "b"], ["out"], name="head",
                                      transB=1))
        shape = [T, C]
    else:
        nodes += [helper.make_node("MatMul", ["feat", "w"], ["m"], name="head"),
                  helper.make_node("Add", ["m", "b"], ["out"], name="head_bias")]
        shape = [T, 1, C]
    graph = helper.make_graph(
        nodes, "views", [helper.make_tensor_value_info("joined", TensorProto.FLOAT,
                                                       [1, T * D * K, 1, 1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.asarray(v, np.int64 if "shape" in k else np.float32), k)
         for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)  # the pass reads static shapes


def _lifted(model: onnx.ModelProto):
    graph, done = gs.import_onnx(model), Rewrites()
    source = graph.inputs[0]
    assert lift_step_heads(graph, [source], 14, done)
    graph.cleanup().toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    return proto, graph, done


@pytest.mark.parametrize("head", ["matmul", "gemm"])
def test_the_time_major_views_become_a_squeeze_of_one_reshape_of_the_steps(head):
    model = _views_model(head)
    after, graph, done = _lifted(model)
    ops = [n.op for n in graph.nodes]
    assert ops[:2] == ["Reshape", "Squeeze"] and "Transpose" not in ops
    reshape, squeeze = graph.nodes[:2]
    assert reshape.inputs[0].name == "joined"
    assert list(reshape.outputs[0].shape) == [1, T, D * K] if head == "gemm" else [1, T, 1, D * K]
    assert squeeze.outputs[0].name == "feat"  # the tensor the head reads keeps its name
    assert all(done.derived[n.name] == "join_dirs" for n in (reshape, squeeze))
    x = {"joined": np.random.default_rng(0).standard_normal((1, T * D * K, 1, 1)
                                                           ).astype(np.float32)}
    want, got = run(model, x)["out"], run(after, x)["out"]
    if head == "matmul":
        assert np.array_equal(want, got)  # pure layout
        return
    assert ops[2:] == ["MatMul", "Add"] and "Gemm" in done.rewritten["head"]
    terms = np.abs(x["joined"].reshape(T, D * K)) @ np.abs(
        numpy_helper.to_array(model.graph.initializer[3]).T) + np.abs(
        numpy_helper.to_array(model.graph.initializer[4]))
    assert np.all(np.abs(want - got) <= 2 * D * K * U * terms)


def test_a_transpose_that_moves_a_longer_axis_is_no_view():
    graph = gs.import_onnx(_views_model("matmul"))
    transpose = next(n for n in graph.nodes if n.op == "Transpose")
    assert is_view(transpose)  # [T, D, 1, K] -> [T, 1, D, K]: only the unit axis moves
    transpose.attrs["perm"] = [0, 3, 2, 1]
    transpose.outputs[0].shape = [T, K, 1, D]
    assert not is_view(transpose)


def test_a_batch_of_two_keeps_its_views():
    """A batch above 1 (axis 0 of the source) is no source: the unroll passes none, and a view
    of it that reorders is not taken (the chain stops at the Transpose)."""
    model = _views_model("matmul")
    graph = gs.import_onnx(model)
    transpose = next(n for n in graph.nodes if n.op == "Transpose")
    transpose.inputs[0].shape = [T, D, 2, K]
    assert not is_view(transpose)


@pytest.mark.parametrize("head", ["squeeze", "crnn"])
def test_the_unrolled_cell_with_its_views_remade_is_bit_equal_to_it_without(head, monkeypatch):
    """The whole unroll on onnxruntime with and without ``lift_step_heads``: the same values."""
    from mrvl_convert.frontend import recurrent_unroll
    from support.recurrent import feeds_for, unrolled
    from support.step_heads import step_head_model
    model = onnx.shape_inference.infer_shapes(step_head_model(
        "LSTM", head, direction="forward" if head == "squeeze" else "bidirectional"))
    lifted, graph, _ = unrolled(model)
    assert _seeded(graph)
    monkeypatch.setattr(recurrent_unroll, "lift_step_heads", lambda *args: False)
    plain, graph, _ = unrolled(model)
    assert not _seeded(graph)
    feeds = feeds_for(model)
    assert np.array_equal(run(lifted, feeds)["logits"], run(plain, feeds)["logits"])


def _seeded(graph: gs.Graph) -> bool:
    """``feat`` (what the head reads) is a Squeeze(0) of a ``[1] + shape`` Reshape."""
    feat = graph.tensors()["feat"]
    maker = feat.inputs[0]
    return maker.op == "Squeeze" and list(maker.inputs[0].shape) == [1] + list(feat.shape) \
        and maker.inputs[0].inputs[0].op == "Reshape"
