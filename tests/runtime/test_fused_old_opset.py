"""fused.py: a CPU stage of an opset-11 model is converted to the fused session's opset 13, not
read as if it were written for it."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.runtime import HybridSession


def test_an_opset_11_softmax_on_the_cpu_computes_what_the_model_does(tmp_path):
    """Softmax(axis=1) of a 4-D tensor is over C*H*W before opset 13, over C from 13: fused
    at 13, main's session gave the opset-13 meaning (all ones here, C = 1)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((1, 3, 3, 3))
                                .astype(np.float32) * 0.3, "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Softmax", ["c"], ["y"], axis=1, name="softmax")],
        "old_softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    result = mrvl_convert.convert(model, tmp_path / "a")
    assert result.placement("softmax")["placement"] == "cpu"
    feed = {"x": np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    session = HybridSession(result.out_dir)
    got = session.run(None, feed)[0]
    np.testing.assert_allclose(got, want, atol=2e-3)
    assert session.fused  # its CPU stage converted to the fused session's opset 13
