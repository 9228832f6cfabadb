"""Shape inference's export skips the weights' bytes without changing what inference reads."""
import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.shape_arithmetic import drop_weight_data, export_weightless


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w")
    half = numpy_helper.from_array(rng.standard_normal((48, 40)).astype(np.float16), "h")
    shape = numpy_helper.from_array(np.array([1, 2, 20], np.int64), "shape")
    small = numpy_helper.from_array(np.ones((40,), np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["y", "hf"], ["z"]),
             helper.make_node("Add", ["z", "b"], ["s"]),
             helper.make_node("Reshape", ["s", "shape"], ["out"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 20])],
        [weight, half, shape, small])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _graph() -> gs.Graph:
    graph = gs.import_onnx(_model())
    for tensor in graph.tensors().values():
        if isinstance(tensor, gs.Constant):
            tensor.values  # loaded as canonicalize's passes leave them: numpy arrays
    return graph


def test_same_proto_as_exporting_then_dropping_the_weights():
    graph = _graph()
    full = gs.export_onnx(graph, do_type_check=False)
    drop_weight_data(full)
    weightless = export_weightless(graph)
    assert weightless.SerializeToString() == full.SerializeToString()
    kept = {init.name: init for init in weightless.graph.initializer}
    assert not kept["w"].raw_data and not kept["h"].raw_data  # the weights went without bytes
    assert numpy_helper.to_array(kept["shape"]).tolist() == [1, 2, 20]  # values inference reads


def test_the_graph_keeps_its_weights():
    graph, before = _graph(), _graph()
    export_weightless(graph)
    assert (gs.export_onnx(graph, do_type_check=False).SerializeToString()
            == gs.export_onnx(before, do_type_check=False).SerializeToString())


def test_lazily_loaded_weights_go_without_bytes_too():
    graph = gs.import_onnx(_model())  # values not loaded: gs keeps the onnx tensors
    full = gs.export_onnx(graph, do_type_check=False)
    drop_weight_data(full)
    assert export_weightless(graph).SerializeToString() == full.SerializeToString()
    again = {i.name: i for i in gs.export_onnx(graph, do_type_check=False).graph.initializer}
    assert numpy_helper.to_array(again["w"]).tolist() == numpy_helper.to_array(
        _model().graph.initializer[0]).tolist()


def test_without_value_info_is_the_export_with_it_deleted():
    """What canonicalize's inference exports: the same proto as exporting every tensor's value
    info and deleting them, and the graph keeps each tensor's type and shape."""
    graph = _graph()
    for node in graph.nodes:  # intermediate tensors typed and shaped, as after inference
        for tensor in node.outputs:
            tensor.dtype, tensor.shape = np.float32, [1, 2]
    full = export_weightless(graph)
    assert len(full.graph.value_info) > 0
    del full.graph.value_info[:]
    assert export_weightless(graph, value_info=False).SerializeToString() == \
        full.SerializeToString()
    assert all(t.dtype == np.float32 and t.shape == [1, 2]
               for node in graph.nodes for t in node.outputs)


def test_a_graph_holding_a_subgraph_keeps_the_subgraphs_value_info():
    body = helper.make_graph([helper.make_node("Relu", ["y"], ["r"])], "then", [],
                             [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 64])])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("If", ["c"], ["o"], then_branch=body, else_branch=body)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1, 64])],
        value_info=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    imported = gs.import_onnx(helper.make_model(graph))
    full = export_weightless(imported)
    del full.graph.value_info[:]
    assert export_weightless(imported, value_info=False).SerializeToString() == \
        full.SerializeToString()
