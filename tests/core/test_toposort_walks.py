"""core/toposort.py's walks shortened (issue 45: the per-node cost of a conversion): the names
it treats as local are graphsurgeon's ``_local_tensors()``, and only a node holding a subgraph
is asked for its subgraphs, so the order stays graphsurgeon's, also with a Loop whose body
reads a tensor of the outer graph."""
from __future__ import annotations

import random

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

from mrvl_convert.core import toposort as topo
from mrvl_convert.core.graph import local_names
from support.corpus_audio import audio_vad
from support.recurrent import crnn


def _loop_reading_outside() -> onnx.ModelProto:
    """x -> Relu -> r; a Loop whose body adds r (an outer tensor) to its carried value; the
    Loop's result and r feed an Add; a constant weight and a constant graph output too."""
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["carried", "r"], ["next"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carried", f, [1, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("next", f, [1, 4])])
    nodes = [
        helper.make_node("Mul", ["looped", "w"], ["y"], name="scale"),
        helper.make_node("Loop", ["trip", "", "r"], ["looped"], name="loop", body=body),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
    ]
    inits = [helper.make_tensor("trip", TensorProto.INT64, [], [3]),
             onnx.numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), "w"),
             onnx.numpy_helper.from_array(np.ones((2,), np.float32), "k")]
    graph = helper.make_graph(nodes, "loop_outer", [helper.make_tensor_value_info("x", f, [1, 4])],
                              [helper.make_tensor_value_info("y", f, [1, 4]),
                               helper.make_tensor_value_info("k", f, [2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


_BUILDS = {"loop_outer": _loop_reading_outside, "crnn": lambda: crnn(steps=4),
           "if_branches": audio_vad}


@pytest.mark.parametrize("name", sorted(_BUILDS))
def test_local_names_are_graphsurgeons_local_tensors(name) -> None:
    graph = gs.import_onnx(_BUILDS[name]())
    assert local_names(graph) == set(graph._local_tensors())
    for subgraph in graph.subgraphs(recursive=True):
        assert local_names(subgraph) == set(subgraph._local_tensors())


@pytest.mark.parametrize("seed", range(3))
def test_a_loop_reading_an_outer_tensor_sorts_as_graphsurgeon(seed) -> None:
    model = _loop_reading_outside()
    ours, theirs = gs.import_onnx(model), gs.import_onnx(model)
    order = list(range(len(ours.nodes)))
    random.Random(seed).shuffle(order)
    ours.nodes = [ours.nodes[i] for i in order]
    theirs.nodes = [theirs.nodes[i] for i in order]
    theirs.toposort()
    assert [n.name for n in topo.toposort(ours).nodes] == [n.name for n in theirs.nodes]
    # the Loop follows the Relu whose output only its body reads
    names = [n.name for n in ours.nodes]
    assert names.index("relu") < names.index("loop") < names.index("scale")


def test_a_graph_without_subgraphs_is_walked_once_for_them(monkeypatch) -> None:
    """Each node is asked for its subgraphs once (not again per producer lookup), and no map
    of every tensor is built (graphsurgeon's ``tensors()``, checked per tensor)."""
    graph = gs.import_onnx(crnn(steps=4))
    graph.nodes = graph.nodes[::-1]
    asked = []
    subgraphs = gs.Node.subgraphs

    def counted(node, recursive=False):
        asked.append(node.name)
        return subgraphs(node, recursive)

    def refused(self, check_duplicates=False):
        raise AssertionError("tensors() walked")

    monkeypatch.setattr(gs.Node, "subgraphs", counted)
    monkeypatch.setattr(gs.Graph, "tensors", refused)
    topo.toposort(graph)
    assert len(asked) <= len(graph.nodes)
