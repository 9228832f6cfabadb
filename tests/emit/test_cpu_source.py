"""``emit/cpu_onnx.source``: the part of the canonical graph's export that the CPU stages read.
Every CPU stage built from it is byte for byte the stage built from the whole export, for any
choice of the stage's nodes: shared and unshared weights, a weight read only inside an If's
branch, graph outputs, tensors with and without shapes, and a function the graph holds."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.emit import cpu_onnx
from mrvl_convert.ir.stages import Stage, Unit


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w", (4, 3, 3, 3)), ("m", (1, 4, 8, 8)), ("k", (1, 4, 1, 1)),
                                   ("inner", (1,)))]
    branch = helper.make_graph(
        [helper.make_node("Mul", ["b", "inner"], ["then_out"], name="then_mul")], "then", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [1, 4, 8, 8])])
    other = helper.make_graph(
        [helper.make_node("Identity", ["b"], ["else_out"], name="else_id")], "else", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [1, 4, 8, 8])])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Mod", ["r", "m"], ["a"], name="mod", fmod=1),
             helper.make_node("Mul", ["a", "k"], ["b"], name="mul"),
             helper.make_node("Add", ["b", "m"], ["y"], name="add"),
             helper.make_node("Greater", ["flag", "zero"], ["cond"], name="greater"),
             helper.make_node("If", ["cond"], ["z"], name="if", then_branch=branch,
                              else_branch=other)]
    zero = numpy_helper.from_array(np.zeros(1, np.float32), "zero")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                     helper.make_tensor_value_info("flag", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])], weights + [zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _stage(graph: gs.Graph, names) -> Stage:
    nodes = [n for n in graph.nodes if n.name in names]
    return Stage("cpu", "cpu_0", [Unit(0, nodes, None)],
                 [t for n in nodes for t in n.inputs if not isinstance(t, gs.Constant)][:1],
                 [n.outputs[0] for n in nodes][-1:])


def test_stages_built_from_the_source_are_those_built_from_the_whole_export():
    graph = gs.import_onnx(_model())
    graph.nodes[2].outputs[0].shape = None  # a tensor with a dtype and no shape
    whole = gs.export_onnx(graph, do_type_check=False)
    names = [n.name for n in graph.nodes]
    for size in (1, 2, 3, len(names)):
        for chosen in itertools.combinations(names, size):
            stage = _stage(graph, set(chosen))
            part = cpu_onnx.source(graph, set(chosen))
            want = cpu_onnx.build(stage, whole).SerializeToString(deterministic=True)
            assert cpu_onnx.build(stage, part).SerializeToString(deterministic=True) == want, \
                chosen
