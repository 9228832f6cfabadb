"""core/cleanup.py: graphsurgeon's cleanup(remove_unused_graph_inputs=False), in fewer Python
steps, on an unrolled recurrent model (the same nodes, the same order, the same dead nodes
disconnected); a graph holding a subgraph goes to graphsurgeon's own."""
from __future__ import annotations

import onnx_graphsurgeon as gs

from mrvl_convert.core.cleanup import cleanup
from support.corpus_audio import audio_vad
from support.recurrent import cell_model, unrolled


def _wiring(graph: gs.Graph, nodes) -> list:
    return [(n.name, [t.name for t in n.inputs], [t.name for t in n.outputs]) for n in nodes]


def test_an_unrolled_cell_is_cleaned_as_graphsurgeon_cleans_it() -> None:
    model = unrolled(cell_model("GRU", "bidirectional", steps=4))[0]
    theirs, ours = gs.import_onnx(model), gs.import_onnx(model)
    # a dead branch: every node reading the first node's output but no model output
    for graph in (theirs, ours):
        dead = gs.Variable("dead", None, None)
        graph.nodes.append(gs.Node("Relu", "dead_relu", inputs=[graph.nodes[0].outputs[0]],
                                   outputs=[dead]))
    all_theirs, all_ours = list(theirs.nodes), list(ours.nodes)
    theirs.cleanup(remove_unused_graph_inputs=False)
    assert cleanup(ours) is ours
    assert "dead_relu" not in [n.name for n in ours.nodes]
    assert [n.name for n in ours.nodes] == [n.name for n in theirs.nodes]
    assert _wiring(ours, all_ours) == _wiring(theirs, all_theirs)
    assert [t.name for t in ours.inputs] == [t.name for t in theirs.inputs]


def test_a_graph_with_a_subgraph_goes_to_graphsurgeon(monkeypatch) -> None:
    graph = gs.import_onnx(audio_vad())
    assert any(node.op == "If" for node in graph.nodes)
    calls = []
    real = gs.Graph.cleanup
    monkeypatch.setattr(gs.Graph, "cleanup",
                        lambda self, **kw: calls.append(kw) or real(self, **kw))
    cleanup(graph)
    assert calls and calls[0] == {"remove_unused_graph_inputs": False}
