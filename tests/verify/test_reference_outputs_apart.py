"""``reference_session`` hands out an intermediate tensor of a QDQ model as the model computes it.

On integ9, onnxruntime 1.32's transpose optimizer, moving the Transpose that follows a tensor
asked for as a graph output (an Unsqueeze's, before the first QuantizeLinear), put a Q/DQ pair
before the Transpose and gave its output the graph output's name: the reference read the tensor
rounded to the int8 grid and clamped to the calibrated range, and the int8 batchless CNN's
first layer row (the expand_dims of the frame-lifted input) was "over" while its model output
was bit-equal (``test_layer_batchless``)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.reference import reference_session, run_reference

_SCALE = 0.05  # int8 range [-6.4, 6.35]: the feeds below go beyond it


def _unsqueeze_transpose_quantize() -> onnx.ModelProto:
    """x [1, 3, 4] -> Unsqueeze (NHWC, C = 1) -> Transpose to NCHW -> Q -> DQ -> Relu."""
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["nhwc"], name="expand"),
             helper.make_node("Transpose", ["nhwc"], ["nchw"], name="to_nchw", perm=[0, 3, 1, 2]),
             helper.make_node("QuantizeLinear", ["nchw", "s", "z"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dequant"),
             helper.make_node("Relu", ["dq"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "apart", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 4])],
        [numpy_helper.from_array(np.array([3], np.int64), "axes"),
         numpy_helper.from_array(np.array(_SCALE, np.float32), "s"),
         numpy_helper.from_array(np.array(0, np.int8), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _as_written(model: onnx.ModelProto, feed) -> np.ndarray:
    """The model's output with every onnxruntime rewrite off."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(["y"], feed)[0]


def test_an_unsqueeze_before_a_transpose_and_quantize_is_read_unquantized():
    """The Unsqueeze's output is the input with a unit axis, bit for bit (on integ9: rounded to
    multiples of the scale, and 8.0 clamped to 6.35), and the model's output is unchanged."""
    model = _unsqueeze_transpose_quantize()
    x = (np.linspace(-8.0, 8.0, 12, dtype=np.float32) + 0.013).reshape(1, 3, 4)
    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    session = reference_session(proto, [TensorSpec("nhwc", (), "float32"),
                                        TensorSpec("y", (), "float32")])
    nhwc, y = run_reference(session, ["nhwc", "y"], {"x": x}, proto)
    assert np.array_equal(nhwc, x[..., None])
    assert np.array_equal(y, _as_written(model, {"x": x}))
    # still the model's names: the tensor the nodes read is renamed, the output keeps its own
    assert {o.name for o in proto.graph.output} == {"y", "nhwc"}
    assert [n.op_type for n in proto.graph.node][:2] == ["Unsqueeze", "Identity"]
