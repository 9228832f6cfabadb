"""An int8 region's float span (a GELU between two int8 FCs) whose input DequantizeLinear
reaches beyond fp16's 65504 (magika's dense_2: scale 14538, +-1.85e6) runs on the CPU in fp32
(``rules/int8_range.py``). On integ10 the span was fp16 layers: inf, and verify against the QDQ
model FAILed."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_graphsurgeon as gs

import mrvl_convert
from mrvl_convert.rules.int8_range import dequantized_range

_IN, _HID, _OUT = 16, 8, 4


def _int8(name: str, values: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(values.astype(np.int8), name)


def _fc_gelu_fc(big_scale: float) -> onnx.ModelProto:
    """x -> Q/DQ -> int8 FC (output scale ``big_scale``) -> Q/DQ -> bias Add, GELU (Erf form, in float)
    -> Q/DQ -> int8 FC -> Q/DQ -> y, all symmetric per-tensor int8."""
    rng = np.random.default_rng(0)
    f = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    inits = [f("s_x", 1 / 127), f("s_w1", 1000.0), f("s_h", big_scale), f("s_g", big_scale),
             f("s_w2", 1e-6), f("s_y", 40 / 127), _int8("z", np.array(0)),
             _int8("w1", rng.integers(-127, 128, (_IN, _HID))),
             _int8("w2", rng.integers(-127, 128, (_HID, _OUT))),
             f("bias", rng.uniform(-1, 1, _HID)), f("rsqrt2", 1 / np.sqrt(2)), f("one", 1.0), f("half", 0.5)]
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s_x", "z"], ["xq"]),
             n("DequantizeLinear", ["xq", "s_x", "z"], ["xd"]),
             n("DequantizeLinear", ["w1", "s_w1", "z"], ["w1d"]),
             n("MatMul", ["xd", "w1d"], ["h"]),
             n("QuantizeLinear", ["h", "s_h", "z"], ["hq"]),
             n("DequantizeLinear", ["hq", "s_h", "z"], ["hdq"], name="dq_wide"),
             n("Add", ["hdq", "bias"], ["hd"]),
             n("Mul", ["hd", "rsqrt2"], ["t"]), n("Erf", ["t"], ["e"]),
             n("Add", ["e", "one"], ["a"]), n("Mul", ["hd", "a"], ["xa"]),
             n("Mul", ["xa", "half"], ["g"], name="gelu_out"),
             n("QuantizeLinear", ["g", "s_g", "z"], ["gq"]),
             n("DequantizeLinear", ["gq", "s_g", "z"], ["gd"]),
             n("DequantizeLinear", ["w2", "s_w2", "z"], ["w2d"]),
             n("MatMul", ["gd", "w2d"], ["o"]),
             n("QuantizeLinear", ["o", "s_y", "z"], ["oq"]),
             n("DequantizeLinear", ["oq", "s_y", "z"], ["y"])]
    graph = helper.make_graph(nodes, "fc_gelu_fc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, _IN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, _OUT])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _feeds() -> list:
    return [{"x": x} for x in np.random.default_rng(1).uniform(-1, 1, (4, 1, _IN))
            .astype(np.float32)]


def test_a_float_span_beyond_fp16_runs_on_cpu_and_verifies(tmp_path):
    model = _fc_gelu_fc(big_scale=2e6 / 127)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    result = mrvl_convert.convert(path, tmp_path / "out")
    cpu = {e["name"]: e.get("reason", "") for e in result.placements if e["placement"] == "cpu"}
    assert "dq_wide" in cpu and "gelu_out" in cpu, cpu
    assert "+-2e+06 exceeds fp16's 65504" in cpu["gelu_out"], cpu["gelu_out"]
    # both FCs stay int8 layers on the accelerator
    fcs = [(e["placement"], e.get("rule")) for e in result.placements if e["op_type"] == "MatMul"]
    assert fcs == [("mrvl", "mrvl.qnn_fc_ni2no")] * 2, fcs
    # integ10: one Mrvl subgraph, inf in the fp16 GELU, FAIL (y off by 80 against the QDQ model)
    comparison = mrvl_convert.compare(path, tmp_path / "out", _feeds())
    assert comparison.passed and not comparison.overflow, comparison


def test_a_float_span_within_fp16_keeps_its_fp16_layers(tmp_path):
    """The same network with an output scale whose range fp16 holds: nothing moves."""
    model = _fc_gelu_fc(big_scale=6e4 / 127)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    result = mrvl_convert.convert(path, tmp_path / "out")
    assert result.summary["cpu_subgraphs"] == 0, [
        (e["name"], e.get("reason")) for e in result.placements if e["placement"] == "cpu"]


def test_dequantized_range_counts_the_zero_point():
    def dq(zero: np.ndarray) -> gs.Node:
        x = gs.Variable("x", zero.dtype, [4])
        return gs.Node("DequantizeLinear", "dq", inputs=[
            x, gs.Constant("s", np.array(2.0, np.float32)), gs.Constant("z", zero)],
            outputs=[gs.Variable("y", np.float32, [4])])
    assert dequantized_range(dq(np.array(0, np.int8))) == 256.0
    assert dequantized_range(dq(np.array(10, np.uint8))) == 490.0
    assert dequantized_range(dq(np.array(-100, np.int8))) == 454.0
