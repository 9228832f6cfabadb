"""The nodes a rewrite adds for the node it serves (frontend/derived_nodes.py): fresh names after
the served node and the op, the output after the node, each recorded as derived."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.derived_nodes import DerivedNodes


def _graph():
    x = gs.Variable("x", np.float32, [1, 4])
    relu_out = gs.Variable("conv_relu_out", np.float32, [1, 4])   # a name the adder must avoid
    relu = gs.Node("Relu", "conv_relu", inputs=[x], outputs=[relu_out])
    return gs.Graph(nodes=[relu], inputs=[x], outputs=[relu_out]), x


def test_nodes_are_named_after_the_served_node_and_recorded_as_derived():
    graph, x = _graph()
    done = Rewrites()
    add = DerivedNodes(graph, Names(graph), done, "conv")
    y = add.node("Relu", [x], [1, 4], np.float32)
    z = add.node("Transpose", [y], [4, 1], np.float32, perm=[1, 0])
    assert [n.name for n in graph.nodes[1:]] == ["conv_relu_1", "conv_transpose"]
    assert (y.name, z.name) == ("conv_relu_1_out", "conv_transpose_out")
    assert add.last is graph.nodes[-1] and add.last.attrs == {"perm": [1, 0]}
    assert done.derived == {"conv_relu_1": "conv", "conv_transpose": "conv"}


def test_a_given_output_and_a_suffix():
    graph, x = _graph()
    done = Rewrites()
    out = gs.Variable("wanted", np.float32, [1, 4])
    add = DerivedNodes(graph, Names(graph), done, "mean", suffix="_4d")
    assert add.node("Reshape", [x], out=out) is out
    assert graph.nodes[-1].name == "mean_reshape_4d" and graph.nodes[-1].outputs == [out]
