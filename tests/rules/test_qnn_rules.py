"""The int8 rules' activation check (``fused_activation``, rules/qnn_checks.py): a Relu or a
clamp that is one at its scale fuses as relu, any one-input function of the int8 value as a LUT,
and what is not a function of the int8 value alone (an operand that varies per channel, one
computed at run time) is refused with the reason; ``fused_relu``, its old name, still loads."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.rules.loader import load_rule_file


def _qdq(tmp_path: Path, nodes, inits: Dict[str, np.ndarray]) -> Path:
    rng = np.random.default_rng(0)
    inits = dict(inits, w=rng.standard_normal((4, 3, 3, 3)) * 0.3, b=np.zeros(4),
                 w2=rng.standard_normal((2, 4, 1, 1)) * 0.5)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])] \
        + nodes + [helper.make_node("Conv", ["o", "w2"], ["y"], name="head")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    onnx.save(model, tmp_path / "float.onnx")
    calibration = rng.uniform(-1, 1, (8, 3, 6, 6)).astype(np.float32)
    return quantize_int8(tmp_path / "float.onnx", tmp_path / "qdq.onnx", {"x": calibration})


@pytest.mark.parametrize("op, extra, attrs", [
    ("HardSwish", {}, {}), ("HardSigmoid", {}, {"alpha": 0.25}), ("Elu", {}, {}),
    ("Div", {"k": np.array(3.0)}, {}), ("LeakyRelu", {}, {"alpha": 0.3}),
    ("Softplus", {}, {})])
def test_a_one_input_function_after_a_conv_is_its_lut(tmp_path, op, extra, attrs):
    nodes = [helper.make_node(op, ["c"] + list(extra), ["o"], name="act", **attrs)]
    result = mrvl_convert.convert(_qdq(tmp_path, nodes, extra), tmp_path / "out")
    assert result.placement("act")["rule"] == "mrvl.qnn_conv2d"
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]


def test_a_per_channel_operand_is_no_lut_and_says_why(tmp_path):
    """Div by a per-channel constant is not one function of the int8 value: the conv takes no
    tail, no standalone LUT either, and the reason names the operand."""
    extra = {"k": np.array([1.0, 2.0, 3.0, 4.0]).reshape(4, 1, 1)}
    nodes = [helper.make_node("Div", ["c", "k"], ["o"], name="act")]
    result = mrvl_convert.convert(_qdq(tmp_path, nodes, extra), tmp_path / "out")
    entry = result.placement("act")
    assert entry["placement"] == "cpu"
    assert "not one constant value" in entry["reason"], entry["reason"]


def test_fused_relu_the_checks_old_name_still_loads(tmp_path):
    text = """format_version: 1
composites:
  - name: user.qnn_conv2d
    layer: Conv2D
    priority: 120
    absorb: [DequantizeLinear]
    pattern:
      - {role: in_dq, op: [DequantizeLinear]}
      - {role: conv, op: [Conv]}
      - {role: out_q, op: [QuantizeLinear]}
      - {role: act_dq, op: [DequantizeLinear], optional: true}
      - {role: act, op: [Relu], optional: true}
      - {role: act_q, op: [QuantizeLinear], optional: true}
    constraints:
      - {role: act_dq, check: fused_relu, reason: "{detail}"}
"""
    path = tmp_path / "user.yaml"
    path.write_text(text)
    [rule] = load_rule_file(path)
    assert [c.check for c in rule.constraints if c.role == "act_dq"] == ["fused_relu"]
