"""``canonical_forms.Names``: the names it starts from are ``set(graph.tensors())`` and the node
names, read without graphsurgeon's tensor map (``_tensor_names``), on graphs with optional
inputs left empty, dangling graph inputs and outputs, constants and an If's branches."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.canonical_forms import Names, _tensor_names
from support.models import conv_then_cpu_tail
from support.recurrent import crnn


def _optional_and_branches():
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    branch = helper.make_graph(
        [helper.make_node("Relu", ["r"], ["then_out"], name="then_relu")], "then", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], name="resize"),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch,
                              else_branch=branch)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2]),
                     helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                     helper.make_tensor_value_info("unused", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])], [scales])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_names_are_graphsurgeons_tensor_map_and_the_nodes():
    for model in (conv_then_cpu_tail(), crnn(steps=4, hidden=4), _optional_and_branches()):
        graph = gs.import_onnx(model)
        graph.outputs.append(gs.Variable("dangling_out", dtype=np.float32))
        assert _tensor_names(graph) == set(graph.tensors())
        assert Names(graph).used == {n.name for n in graph.nodes} | set(graph.tensors())
        assert "" not in _tensor_names(graph)
