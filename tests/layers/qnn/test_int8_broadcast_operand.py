"""An int8 Mul whose second operand is a lower-rank activation (``[C, 1, 1]`` times
``[1, C, H, W]``: a gate computed at run time, or a constant an exporter's quantizer took for an
activation) stays on CPU with the rule's reason, as in float, instead of failing the conversion
with an internal IndexError; a gate of the output's rank (``[1, C, 1, 1]``) is the int8 Mul2D.
Both are bit-equal to onnxruntime's run of the QDQ model."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.int8 import converted_int8, run_both


def _gated(gate_shape: List[int]) -> onnx.ModelProto:
    """Conv -> y; gate = Sigmoid(Reshape(GlobalAveragePool(y), gate_shape)); Conv(y * gate)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "b2"),
             numpy_helper.from_array(np.array(gate_shape, np.int64), "gate_shape")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["y"], ["pooled"]),
             helper.make_node("Reshape", ["pooled", "gate_shape"], ["flat"]),
             helper.make_node("Sigmoid", ["flat"], ["gate"]),
             helper.make_node("Mul", ["y", "gate"], ["gated"], name="gate_mul"),
             helper.make_node("Conv", ["gated", "w2", "b2"], ["out"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "gated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _feeds() -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]


def _mul_entry(result) -> dict:
    [mul] = [n for n in result.report["nodes"] if n["name"] == "gate_mul"]
    return mul


def test_lower_rank_gate_stays_on_cpu_with_the_reason(tmp_path):
    result, qdq = converted_int8(_gated([4, 1, 1]), tmp_path / "rank3")
    mul = _mul_entry(result)
    assert mul["placement"] == "cpu"
    assert "another rank than the output" in mul["reason"]
    got, want = run_both(qdq, result.out_dir, _feeds())
    assert np.array_equal(got, want)


def test_gate_of_the_output_rank_is_an_int8_mul(tmp_path):
    result, qdq = converted_int8(_gated([1, 4, 1, 1]), tmp_path / "rank4")
    assert _mul_entry(result)["placement"] == "mrvl"
    got, want = run_both(qdq, result.out_dir, _feeds())
    assert np.array_equal(got, want)
