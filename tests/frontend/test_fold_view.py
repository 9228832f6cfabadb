"""frontend/fold_view.py: graphsurgeon folds the part of the graph it can change, and the
result is the graph folding the whole one gives, byte for byte."""
from __future__ import annotations

import copy

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from mrvl_convert.frontend import folding
from mrvl_convert.frontend.fold_view import fold_view, lower_constant_nodes
from support.strategies.costpass import SHAPE, FoldGraph


def folded_bytes(model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch,
                 whole: bool) -> bytes:
    """The model after ``folding.fold_constants``, in a view or (``whole``) as main folded."""
    with monkeypatch.context() as patch:
        if whole:  # main's path: graphsurgeon's own Constant lowering, the whole graph
            patch.setattr(folding, "fold_view", lambda graph: None)
            patch.setattr(folding, "lower_constant_nodes", lambda graph: None)
        graph = gs.import_onnx(shaped(model))
        refused = folding.fold_constants(graph, verbose=False)
    return gs.export_onnx(graph.cleanup()).SerializeToString() + repr(refused).encode()


def shaped(model: onnx.ModelProto) -> onnx.ModelProto:
    """As load gives it: with its shapes inferred (folding's bounds read them)."""
    return onnx.shape_inference.infer_shapes(copy.deepcopy(model))


def paddle_like() -> onnx.ModelProto:
    """Weights as Constant nodes (paddle2onnx's), a shape computed from Shape, a constant
    chain: what folds is a few nodes among many that do not."""
    g = FoldGraph()
    value = "x"
    for _ in range(6):
        weight = g.constant_node(np.full([4, 4, 1, 1], 0.25, "f4"))
        value = g.op("Relu", [g.op("Conv", [value, weight])])
    value = g.reshape_by_shape(value)
    chain = g.op("Sqrt", [g.op("Mul", [g.const(np.full([144], 2.0, "f4")),
                                      g.const(np.full([144], 8.0, "f4"))])])
    return g.model([g.op("Add", [value, chain])])


def test_the_view_holds_only_what_folds_and_its_readers():
    graph = gs.import_onnx(shaped(paddle_like()))
    lower_constant_nodes(graph)
    view = fold_view(graph)
    ops = sorted(n.op for n in view.nodes)
    # Shape, Gather, Unsqueeze, Concat, Mul, Sqrt fold; Reshape and Add read them
    assert ops == ["Add", "Concat", "Gather", "Mul", "Reshape", "Shape", "Sqrt", "Unsqueeze"]
    assert len(graph.nodes) == 26


def test_folding_in_the_view_is_folding_the_whole_graph(monkeypatch):
    model = paddle_like()
    assert folded_bytes(model, monkeypatch, whole=False) == folded_bytes(model, monkeypatch,
                                                                         whole=True)


def test_the_folded_model_computes_what_the_model_did(monkeypatch):
    model = paddle_like()
    graph = gs.import_onnx(shaped(model))
    folding.fold_constants(graph, verbose=False)
    folded = gs.export_onnx(graph.cleanup())
    assert {n.op_type for n in folded.graph.node} == {"Conv", "Relu", "Reshape", "Add"}
    feed = {"x": np.random.default_rng(0).standard_normal(SHAPE).astype("f4")}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = ort.InferenceSession(folded.SerializeToString()).run(None, feed)
    np.testing.assert_array_equal(want[0], got[0])


def _if_model() -> onnx.ModelProto:
    g = FoldGraph()
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    g.nodes.append(helper.make_node("If", [g.const(np.array(True))], ["y"], name="if",
                                    then_branch=branch, else_branch=branch))
    return g.model(["y"])


def _cast_model() -> onnx.ModelProto:
    """An Add between a Cast to float and a Cast back to int64: graphsurgeon may rewire it."""
    g = FoldGraph()
    shape = g.op("Cast", [g.op("Shape", ["x"])], to=TensorProto.FLOAT)
    total = g.op("Cast", [g.op("Add", [shape, g.const(np.ones(4, "f4"))])],
                 to=TensorProto.INT64)
    return g.model([g.op("Reshape", ["x", total])])


def _clash_model() -> onnx.ModelProto:
    """A reader of a folded tensor named as a constant the view lacks."""
    g = FoldGraph()
    scale = g.const(np.float32(2.0))
    g.op("Mul", ["x", scale], name="weight")
    g.inits.append(onnx.numpy_helper.from_array(np.ones(SHAPE, "f4"), "Mul_0"))
    chain = g.op("Sqrt", [g.const(np.float32(4.0))])
    out = g.op("Mul", [g.op("Add", ["x", "Mul_0"]), chain], name="c0")
    return g.model([out])


@pytest.mark.parametrize("build", [_if_model, _cast_model, _clash_model])
def test_what_the_view_cannot_reproduce_folds_the_whole_graph(build, monkeypatch):
    graph = gs.import_onnx(shaped(build()))
    lower_constant_nodes(graph)
    assert fold_view(graph) is None
    model = build()
    assert folded_bytes(model, monkeypatch, whole=False) == folded_bytes(model, monkeypatch,
                                                                         whole=True)


def test_a_constant_node_graphsurgeon_would_not_lower_stays():
    graph = gs.Graph(nodes=[gs.Node("Constant", attrs={"value_float": 1.0, "value_int": 2},
                                    outputs=[gs.Variable("k")])])
    lower_constant_nodes(graph)
    assert isinstance(graph.nodes[0].outputs[0], gs.Variable)
