"""``verify/reference.py``: onnxruntime's MatMulAddFusion (1.2x and later) adds shape
initializers named ``gemm_input_shape`` and ``gemm_output_shape`` for an N-D MatMul + Add
whatever the graph holds. A model onnxruntime optimized once holds those names
(``quant_pre_process``: rec-model's onnxruntime QDQ models), and verify's rewrite of it makes a
new such pair (the unrolled cell's input projection): the reference failed to load, "Attempt
to replace the existing tensor", and verify reported no verdict. The reference renames the
model's own tensors of those names; the computation is the same."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.reference import reference_session


def _model(shape_name: str) -> onnx.ModelProto:
    """x [6, 4] -> Reshape by the initializer ``shape_name`` -> [2, 3, 4] -> MatMul + Add."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Reshape", ["x", shape_name], ["r"], name="pre"),
             helper.make_node("MatMul", ["r", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.array([2, 3, 4], np.int64), shape_name),
             numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("name", ["gemm_input_shape", "gemm_output_shape"])
def test_a_model_holding_onnxruntimes_fusion_names_runs_as_the_reference(name):
    model = _model(name)
    session = reference_session(model, [TensorSpec("y", (2, 3, 5), "float32")])
    x = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)
    (got,) = session.run(["y"], {"x": x})
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer[1:])
    np.testing.assert_allclose(got, x.reshape(2, 3, 4) @ w + b, rtol=1e-6, atol=1e-6)
    assert name not in {t.name for t in model.graph.initializer}  # renamed, not removed
    assert model.graph.node[0].input[1] == model.graph.initializer[0].name
