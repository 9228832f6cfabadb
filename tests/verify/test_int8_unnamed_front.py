"""An int8 artifact whose float front (an unnamed Sub and Div by constants before the first
QuantizeLinear: sscd_distilled's pixel normalization) runs as fp16 layers is bit-equal to its
QDQ model: verify names the QDQ model's nodes as the converter does, so it rounds those nodes
where the artifact rounds, and takes the Div as the Mul by the reciprocal the Mul2D layer holds
(issue 45 finding 7: on main the unnamed nodes were not found, nothing was rounded, and the
artifact FAILed against its own QDQ model)."""
from __future__ import annotations

import numpy as np
from onnx import helper

import mrvl_convert
from support.int8 import converted_int8, float_model


def normalized_conv():
    rng = np.random.default_rng(8)
    # an NHWC image normalized per channel, then made NCHW; unnamed, as exported
    nodes = [helper.make_node("Sub", ["x", "mean"], ["centred"]),
             helper.make_node("Div", ["centred", "std"], ["scaled"]),
             helper.make_node("Transpose", ["scaled"], ["nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["nchw", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    inits = {"mean": np.array([0.485, 0.456, 0.406]) * 255,
             "std": np.array([0.229, 0.224, 0.225]) * 255,
             "w": rng.standard_normal((8, 3, 3, 3)), "b": rng.standard_normal(8)}
    return float_model(nodes, inits, [1, 8, 8, 3], [1, 8, 8, 8])


def test_an_unnamed_fp16_front_verifies_bit_equal(tmp_path):
    result, qdq = converted_int8(normalized_conv(), tmp_path / "out", span=255.0)
    forms = [f["source_nodes"] for f in result.report.get("int8_forms", [])]
    assert any("Div" in name for names in forms for name in names)  # an fp16 Mul2D front
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.uniform(0, 255, (1, 8, 8, 3)).astype(np.float32)} for _ in range(8)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
    assert comparison.passed and all(r.max_abs == 0 for r in comparison.judged_rows)
