"""canonical_forms.Names collects the graph's names at the first fresh(), not when made: most
passes make one and find nothing to rewrite (on an unrolled model that collection in each of
~27 passes was a tenth of the conversion)."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.frontend import canonical_forms
from mrvl_convert.frontend.canonical_forms import Names


def _graph() -> gs.Graph:
    x = gs.Variable("x", np.float32, [1, 4])
    y = gs.Variable("y", np.float32, [1, 4])
    return gs.Graph(nodes=[gs.Node("Relu", "relu", inputs=[x], outputs=[y])],
                    inputs=[x], outputs=[y])


def test_a_names_never_asked_reads_no_tensor(monkeypatch) -> None:
    calls = []
    real = canonical_forms._tensor_names
    monkeypatch.setattr(canonical_forms, "_tensor_names",
                        lambda graph: calls.append(graph) or real(graph))
    graph = _graph()
    Names(graph)
    assert calls == []
    names = Names(graph)
    assert names.fresh("y") == "y_1" and names.fresh("relu") == "relu_1"
    assert names.fresh("z") == "z" and len(calls) == 1  # collected once


def test_a_name_the_graph_took_before_the_first_fresh_is_not_given() -> None:
    graph = _graph()
    names = Names(graph)
    z = gs.Variable("z", np.float32, [1, 4])
    graph.nodes.append(gs.Node("Relu", "relu2", inputs=[graph.outputs[0]], outputs=[z]))
    assert names.fresh("z") == "z_1"
    assert names.fresh("relu2") == "relu2_1"
