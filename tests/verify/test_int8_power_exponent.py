"""An fp16 Power layer inside an int8 artifact (the generalized-mean pooling of sscd_distilled:
Pow(x, 3) -> ReduceMean on the CPU, then Pow(., 1/3) -> Gemm on the accelerator) holds its
exponent as the layer's six-decimal attribute (0.333333), not as an fp16 weight: verify's QDQ
reference computes it so, and the artifact is bit-equal to it (issue 45 finding 7: on main the
reference rounded the exponent to fp16, 0.33325, and the artifact FAILed by an int8 step)."""
from __future__ import annotations

import numpy as np
from onnx import helper

import mrvl_convert
from support.int8 import converted_int8, float_model

C = 64


def gem_head():
    rng = np.random.default_rng(21)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Pow", ["r", "three"], ["cube"], name="cube"),
             helper.make_node("ReduceMean", ["cube"], ["mean"], axes=[2, 3], keepdims=0,
                              name="mean"),
             helper.make_node("Pow", ["mean", "third"], ["gem"], name="root"),
             helper.make_node("Gemm", ["gem", "fc", "fb"], ["y"], transB=1, name="fc")]
    inits = {"w": rng.standard_normal((C, 3, 3, 3)) / 3, "b": rng.standard_normal(C) / 3,
             "three": np.array(3.0), "third": np.array(1 / 3),
             "fc": rng.standard_normal((16, C)) / 8, "fb": rng.standard_normal(16) / 8}
    return float_model(nodes, inits, [1, 3, 6, 6], [1, 16])


def test_power_layer_verifies_bit_equal_with_its_written_exponent(tmp_path):
    result, qdq = converted_int8(gem_head(), tmp_path / "out")
    placed = {n["name"]: n for n in result.report["nodes"]}
    assert placed["root"]["placement"] == "mrvl"  # the fp16 Power between quant layers
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.uniform(-1, 1, (1, 3, 6, 6)).astype(np.float32)} for _ in range(16)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
    assert comparison.passed and all(r.max_abs == 0 for r in comparison.judged_rows)
