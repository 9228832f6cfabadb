"""Each Conv its own bias before quantize_static (``quantize/own_bias.py``): two Convs sharing a
bias ``b`` beside an initializer ``b1`` and an activation ``b2`` (tf2onnx's names in
basic-pitch's nmp). On integ11 quantize_static copied the bias for the second Conv as ``b2``, the
activation's name, and the conversion failed; here it converts whole and verify against its QDQ
model passes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize.own_bias import own_biases
from support.int8 import converted_int8


def _shared_bias_model() -> onnx.ModelProto:
    """x -> Conv(b1, b) -> Relu = "b2" -> Conv(w2, b) - "b2": the bias ``b`` read twice."""
    rng = np.random.default_rng(0)
    inits = {"b1": rng.standard_normal((4, 4, 1, 1)), "w2": rng.standard_normal((4, 4, 1, 1)),
             "b": rng.standard_normal(4)}
    nodes = [helper.make_node("Conv", ["x", "b1", "b"], ["c1"], name="conv1"),
             helper.make_node("Relu", ["c1"], ["b2"], name="relu"),
             helper.make_node("Conv", ["b2", "w2", "b"], ["c2"], name="conv2"),
             helper.make_node("Neg", ["b2"], ["n"], name="neg"),
             helper.make_node("Add", ["c2", "n"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_each_conv_gets_its_own_bias_and_computes_the_same():
    model = _shared_bias_model()
    owned = own_biases(model)
    biases = [n.input[2] for n in owned.graph.node if n.op_type == "Conv"]
    assert biases[0] == "b" and biases[1] not in {"b", "b1", "b2"}, biases
    x = np.random.default_rng(1).standard_normal((1, 4, 5, 5)).astype(np.float32)
    assert np.array_equal(_run(owned, x), _run(model, x))  # exact: the same values
    assert [n.input[2] for n in own_biases(model, keep={"conv2"}).graph.node
            if n.op_type == "Conv"] == ["b", "b"]


def test_a_shared_bias_beside_a_colliding_activation_converts_in_int8(tmp_path: Path):
    result, qdq = converted_int8(_shared_bias_model(), tmp_path / "a")
    proto = onnx.load(str(qdq))
    produced = {o for n in proto.graph.node for o in n.output}
    assert not produced & {t.name for t in proto.graph.initializer}  # no shadowed activation
    x = np.random.default_rng(2).uniform(-1, 1, (3, 1, 4, 5, 5)).astype(np.float32)
    comparison = mrvl_convert.compare(qdq, result.out_dir, [{"x": v} for v in x],
                                      with_floor=False)
    assert comparison.passed, comparison.summary_line()
