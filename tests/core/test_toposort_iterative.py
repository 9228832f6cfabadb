"""core/toposort.py: graphsurgeon's node order without its recursion (an unrolled recurrent
cell's paths of thousands of nodes went past Python's recursion limit)."""
from __future__ import annotations

import random
import sys

import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

import mrvl_convert
from mrvl_convert.core.toposort import toposort
from mrvl_convert.frontend.recurrent_reference import unrolled_cells
from support.corpus_audio import audio_vad
from support.recurrent import cell_model, crnn, unrolled


def _order(graph: gs.Graph) -> list:
    return [node.name for node in graph.nodes]


def _shuffled_pair(model: onnx.ModelProto, seed: int):
    """Two imports of ``model`` with their nodes in the same shuffled order."""
    first, second = gs.import_onnx(model), gs.import_onnx(model)
    order = list(range(len(first.nodes)))
    random.Random(seed).shuffle(order)
    first.nodes = [first.nodes[i] for i in order]
    second.nodes = [second.nodes[i] for i in order]
    return first, second


def _is_topological(graph: gs.Graph) -> bool:
    made = {t.name for t in graph.inputs}
    for node in graph.nodes:
        if any(t.name and not isinstance(t, gs.Constant) and t.name not in made
               for t in node.inputs):
            return False
        made.update(t.name for t in node.outputs)
    return True


def _chain(length: int) -> onnx.ModelProto:
    """x -> Relu -> ... -> Relu (``length`` of them) -> y, the nodes listed last first."""
    names = ["x"] + [f"t{i}" for i in range(length - 1)] + ["y"]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"relu{i}")
             for i in range(length)]
    graph = helper.make_graph(nodes[::-1], "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("build", [lambda: crnn(steps=4), lambda: unrolled(cell_model("GRU", "bidirectional", steps=4))[0],
                                   audio_vad], ids=["crnn", "unrolled", "if_branches"])
def test_the_order_is_graphsurgeons(build, seed) -> None:
    ours, theirs = _shuffled_pair(build(), seed)
    try:
        theirs.toposort()
    except Exception:  # noqa: BLE001 - graphsurgeon's own exception type
        # graphsurgeon 0.5.2 (the lowest version) reports a false cycle on a tensor read by
        # nodes met in another order (recurrent_unroll.py's note); ours has none to report
        assert gs.__version__.startswith("0.5."), gs.__version__
        assert _is_topological(toposort(ours))
        return
    assert _order(toposort(ours)) == _order(theirs)
    # the If's branches are sorted too, as graphsurgeon sorts them
    assert [_order(g) for g in ours.subgraphs()] == [_order(g) for g in theirs.subgraphs()]


def test_a_cycle_raises_graphsurgeons_error() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second")]
    graph = helper.make_graph(nodes, "cycle",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    ours, theirs = _shuffled_pair(helper.make_model(graph), 0)
    with pytest.raises(Exception) as expected:
        theirs.toposort()
    with pytest.raises(type(expected.value), match="Cycle"):
        toposort(ours)


def test_a_path_of_thousands_of_nodes_sorts_at_the_default_recursion_limit() -> None:
    assert sys.getrecursionlimit() <= 3000
    ours, theirs = _shuffled_pair(_chain(3000), 0)
    with pytest.raises(RecursionError):
        theirs.toposort()  # what canonicalize called before
    assert _order(toposort(ours)) == [f"relu{i}" for i in range(3000)]


def _depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def test_an_unrolled_cell_never_raises_the_recursion_limit(tmp_path, monkeypatch) -> None:
    """Conversion and verify's int8 reference of an unrolled cell whose longest path (271
    nodes at T=32) needs more frames than graphsurgeon's toposort may take here (2 a node):
    they run within the limit and never raise it (a process-wide setting) any more."""
    def refuse(limit: int) -> None:
        raise AssertionError(f"sys.setrecursionlimit({limit}) called")

    model = crnn(steps=32)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_depth() + 400)
    monkeypatch.setattr(sys, "setrecursionlimit", refuse)
    try:
        result = mrvl_convert.convert(model, tmp_path / "out")
        cells = unrolled_cells(model, {"image": [1, 3, 8, 32]})
    finally:
        monkeypatch.undo()
        sys.setrecursionlimit(limit)
    assert result.summary["mrvl_subgraphs"] >= 1
    assert not any(node.op_type == "LSTM" for node in cells.graph.node)
