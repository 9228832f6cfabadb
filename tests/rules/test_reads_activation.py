"""Every layer computes on an activation (the generic ``reads_activation`` constraint): a node
whose inputs are all constant never becomes a layer. Once the batch check read only a node's
activations, a QuantizeLinear of a reshaped weight (the onnx zoo's Inception-v1 quantized by
quantize_static) matched the quant layer and failed in lowering."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert


def _qdq_gemm_with_a_quantized_constant() -> onnx.ModelProto:
    """x -> Q -> DQ -> Gemm, whose weight is QuantizeLinear(initializer) -> DequantizeLinear."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((10, 16)).astype(np.float32), "w"),
             numpy_helper.from_array(np.float32(0.05), "s"),
             numpy_helper.from_array(np.int8(0), "z"),
             numpy_helper.from_array(np.float32(0.02), "ws")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="xq"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="xd"),
             helper.make_node("QuantizeLinear", ["w", "ws", "z"], ["wq"], name="wq"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "z"], ["wd"], name="wd"),
             helper.make_node("Gemm", ["xd", "wd"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_quantizelinear_of_a_constant_is_no_layer(tmp_path):
    result = mrvl_convert.convert(_qdq_gemm_with_a_quantized_constant(), tmp_path / "o")
    entry = result.placement("wq")
    assert entry["placement"] == "cpu", entry
    assert "every input of this QuantizeLinear is a constant" in entry["reason"], entry
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    assert mrvl_convert.HybridSession(result.out_dir).run(None, {"x": x})[0].shape == (1, 10)
