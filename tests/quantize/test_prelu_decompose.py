"""PRelu decomposed before quantizing (``quantize/prelu.py``): exact in float32, names kept, and
a PRelu left in float (``--keep-fp16``) or with a slope computed at run time left alone."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.quantize.prelu import decompose_prelu


def _prelu(slope: np.ndarray, slope_input: bool = False) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])]
    inits = []
    if slope_input:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, list(slope.shape)))
    else:
        inits.append(numpy_helper.from_array(slope.astype(np.float32), "s"))
    graph = helper.make_graph([helper.make_node("PRelu", ["x", "s"], ["y"], name="act")], "g",
                              inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                     [1, 4, 5, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_decomposition_is_exact_in_float32_and_keeps_the_name():
    slope = np.array([0.25, -0.5, 1.7, 0.0], np.float32).reshape(4, 1, 1)
    model = _prelu(slope)
    decomposed = decompose_prelu(model)
    onnx.checker.check_model(decomposed)
    assert [n.op_type for n in decomposed.graph.node] == ["Relu", "Min", "Mul", "Add"]
    last = decomposed.graph.node[-1]
    assert last.name == "act" and list(last.output) == ["y"]
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 5)).astype(np.float32)
    x[0, :, 0, :] = 0.0
    x[0, :, 1, 0] = -0.0
    np.testing.assert_array_equal(_run(decomposed, x), _run(model, x))


def test_kept_or_run_time_slopes_stay_prelu():
    slope = np.full((4, 1, 1), 0.1, np.float32)
    assert [n.op_type for n in decompose_prelu(_prelu(slope), keep={"act"}).graph.node] == \
        ["PRelu"]
    assert [n.op_type for n in decompose_prelu(_prelu(slope, slope_input=True)).graph.node] == \
        ["PRelu"]
