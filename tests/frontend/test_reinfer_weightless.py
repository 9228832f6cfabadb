"""canonicalize's re-inference after the rewrites exports the graph without its float weights'
bytes and gives the re-imported graph the very arrays it held (issue 45): the graph it returns
is the one exporting every weight and importing it again gave, byte for byte."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.core.toposort import toposort
from mrvl_convert.frontend import canonicalize as canon
from mrvl_convert.frontend.shape_arithmetic import infer_model_shapes


def _model(loaded_values: bool) -> onnx.ModelProto:
    """Gemm-like MatMuls on float32 and fp16 weights (above what inference reads), a small
    bias, a zero-size constant and an int64 shape; intermediate shapes unknown."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((48, 40)).astype(np.float16), "h"),
             numpy_helper.from_array(np.ones((40,), np.float32), "b"),
             numpy_helper.from_array(np.zeros((1, 0), np.float32), "empty"),
             numpy_helper.from_array(np.array([1, 2, 20], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm1"),
             helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("MatMul", ["y", "hf"], ["z"], name="mm2"),
             helper.make_node("Add", ["z", "b"], ["s"], name="add"),
             helper.make_node("Concat", ["s", "empty"], ["c"], axis=1, name="concat"),
             helper.make_node("Reshape", ["c", "shape"], ["out"], name="reshape")]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _graph(model: onnx.ModelProto, loaded_values: bool) -> gs.Graph:
    graph = gs.import_onnx(model)
    if loaded_values:  # as canonicalize's passes leave most: numpy arrays
        for tensor in graph.tensors().values():
            if isinstance(tensor, gs.Constant):
                tensor.values
    return graph


def _exported_and_imported(graph: gs.Graph, original: onnx.ModelProto) -> gs.Graph:
    """What _reinfer_shapes did before: every weight exported with its bytes."""
    proto = gs.export_onnx(graph, do_type_check=False)
    proto.ir_version = original.ir_version
    del proto.graph.value_info[:]
    for output in proto.graph.output:
        if any(not d.HasField("dim_value") for d in output.type.tensor_type.shape.dim):
            output.type.tensor_type.ClearField("shape")
    return toposort(gs.import_onnx(infer_model_shapes(proto)).cleanup(
        remove_unused_graph_inputs=False))


@pytest.mark.parametrize("loaded_values", [True, False], ids=["arrays", "lazy"])
def test_the_reinferred_graph_is_the_exported_and_imported_one(loaded_values) -> None:
    model = _model(loaded_values)
    ours = canon._reinfer_shapes(_graph(model, loaded_values), model)
    theirs = _exported_and_imported(_graph(model, loaded_values), model)
    assert [t.shape for t in ours.outputs] == [[1, 2, 20]]
    assert (gs.export_onnx(ours, do_type_check=False).SerializeToString()
            == gs.export_onnx(theirs, do_type_check=False).SerializeToString())
    for name, tensor in theirs.tensors().items():
        if isinstance(tensor, gs.Constant):
            mine = ours.tensors()[name]
            assert mine.dtype == tensor.dtype and mine.shape == tensor.shape
            assert np.array_equal(mine.values, tensor.values)


def test_inference_gets_no_weight_bytes(monkeypatch) -> None:
    model = _model(True)
    seen = []

    def infer(proto, **options):
        seen.extend(init.name for init in proto.graph.initializer if init.raw_data)
        return infer_model_shapes(proto, **options)

    monkeypatch.setattr(canon, "infer_model_shapes", infer)
    reinferred = canon._reinfer_shapes(_graph(model, True), model)
    assert sorted(seen) == ["b", "shape"]  # the small ones inference may read
    assert np.array_equal(reinferred.tensors()["w"].values,
                          numpy_helper.to_array(model.graph.initializer[0]))
