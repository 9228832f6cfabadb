"""A Relu's or Clip's input quantized with its output's scale at every supported onnxruntime
(quantize/relu_ranges.py): onnxruntime before 1.19 skips that step for symmetric activations,
so a Conv -> Relu became an int8 Conv2D and a requant layer there (CI's lowest versions)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.quantize.relu_ranges import relu_inputs_share_output_scale


def _conv_relu_clip() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.5)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.0, np.float32), "low"),
             numpy_helper.from_array(np.array(0.5, np.float32), "high")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
             helper.make_node("Clip", ["c2", "low", "high"], ["y"], name="clip")]
    inits.append(numpy_helper.from_array((rng.standard_normal((4, 4, 1, 1)) * 0.5)
                                         .astype(np.float32), "w2"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _params(model: onnx.ModelProto, tensor: str):
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    zero = f"{tensor}_zero_point" if f"{tensor}_zero_point" in inits else f"{tensor}_zp"
    return inits[f"{tensor}_scale"], inits[zero]


def test_quantize_int8_gives_relu_and_clip_inputs_their_outputs_scale(tmp_path: Path):
    """The Conv outputs' calibrated ranges are wider (negative values) than the Relu's and
    Clip's outputs: without the pass onnxruntime 1.18 gives them their own, larger scales."""
    source = tmp_path / "m.onnx"
    onnx.save(_conv_relu_clip(), source)
    samples = {"x": np.random.default_rng(4).standard_normal((8, 3, 8, 8)).astype(np.float32)}
    qdq = onnx.load(quantize_int8(source, tmp_path / "q.onnx", samples))
    for before, after in (("c", "r"), ("c2", "y")):
        (scale, zero), (want_scale, want_zero) = _params(qdq, before), _params(qdq, after)
        assert scale.tobytes() == want_scale.tobytes() and zero.tobytes() == want_zero.tobytes()
        assert scale.dtype == want_scale.dtype and zero.dtype == want_zero.dtype


def _qdq_relu(extra_reader: bool) -> onnx.ModelProto:
    value = numpy_helper.from_array
    inits = [value(np.array(0.5, np.float32), "t_scale"), value(np.array(0, np.int8), "t_zp"),
             value(np.array(0.25, np.float32), "r_scale"), value(np.array(0, np.int8), "r_zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "t_scale", "t_zp"], ["tq"], name="q"),
             helper.make_node("DequantizeLinear", ["tq", "t_scale", "t_zp"], ["td"], name="dq"),
             helper.make_node("Relu", ["td"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "r_scale", "r_zp"], ["y"], name="rq")]
    outputs = ["y"]
    if extra_reader:  # the scale is another tensor's too: left as it is
        nodes.append(helper.make_node("QuantizeLinear", ["x", "t_scale", "t_zp"], ["z"],
                                      name="other"))
        outputs.append("z")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(o, onnx.TensorProto.INT8, [2]) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_the_pass_moves_only_a_pairs_own_scale():
    model = _qdq_relu(extra_reader=False)
    shared = relu_inputs_share_output_scale(model)
    assert _params(shared, "t")[0] == np.float32(0.25)
    assert [n.name for n in shared.graph.node] == [n.name for n in model.graph.node]
    assert relu_inputs_share_output_scale(shared) is shared  # nothing left to move
    other = _qdq_relu(extra_reader=True)
    assert relu_inputs_share_output_scale(other) is other
