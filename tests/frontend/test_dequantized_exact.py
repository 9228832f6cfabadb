"""qdq_graph.dequantized is onnxruntime's DequantizeLinear, bit for bit, for each source width."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.qdq_graph import QdqGraph, dequantized

CASES = [(np.uint8, (), 0), (np.int8, (), 0), (np.int8, (6,), 0), (np.uint8, (5,), 1),
         (np.int32, (6,), 0), (np.int32, (), 0)]


def _model(source: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int):
    inits = [numpy_helper.from_array(source, "q"), numpy_helper.from_array(scale, "s"),
             numpy_helper.from_array(zero, "z")]
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq", axis=axis)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, list(source.shape))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("dtype, params, axis", CASES)
def test_bit_equal_to_onnxruntime(dtype, params, axis):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    low, high = (-2**30, 2**30) if dtype == np.int32 else (info.min, info.max + 1)
    source = rng.integers(low, high, size=(6, 5)).astype(dtype)
    zero = (np.zeros(params, dtype) if dtype == np.int32
            else rng.integers(low, high, size=params).astype(dtype))
    scale = (rng.random(params) * 0.37 + 1e-3).astype(np.float32)
    model = _model(source, scale, zero, axis)
    graph = QdqGraph(model)
    got = dequantized(graph, model.graph.node[0], source)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(["y"], {})[0]
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
