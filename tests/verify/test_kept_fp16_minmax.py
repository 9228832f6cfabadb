"""verify's int8 reference computes an fp16 Max/Min layer as the artifact's two layers do
(``verify/kept_fp16.minmax_steps`` after ``layers/_minmax.py``: the device has no maximum
layer, Max(f, o) is o + Relu(f - o)). In an int8 model a Max of two dequantized Convs runs as
fp16 layers of the int8 region (a span of two: one alone is an int8 op's place) on float32 inputs (the dequantizing quant layer is exact), so
``f - o`` rounds where ``max(f, o)`` would not; a reference that rounded only Max's result
differed by fp16 steps, each near a quantization boundary an int8 step after it: deepcut's
int8 row FAILed against its own QDQ model (max_rel 0.096, token ids over its vocabulary) on
the integration branch before this; bit-equal now."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization

C, HW = 8, 16


def _model(op: str, broadcast: bool = True) -> onnx.ModelProto:
    """Max/Min of two Convs, ``b`` one channel (broadcasting: the gap form) or all (pooled)."""
    rng = np.random.default_rng(3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, HW, HW])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, HW, HW])
    weights = [numpy_helper.from_array(rng.standard_normal((out, C, 3, 3)).astype(np.float32)
                                       * 0.3, f"w{k}")
               for k, out in enumerate((C, 1 if broadcast else C, C))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="conv_a", pads=[1] * 4),
             helper.make_node("Conv", ["x", "w1"], ["b"], name="conv_b", pads=[1] * 4),
             helper.make_node(op, ["a", "b"], ["ab"], name="pick"),
             helper.make_node(op, ["ab", "b"], ["m"], name="pick_again"),
             helper.make_node("Conv", ["m", "w2"], ["y"], name="conv_out", pads=[1] * 4)]
    graph = helper.make_graph(nodes, "minmax", [x], [y], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("broadcast", [True, False])
def test_an_int8_models_fp16_max_is_judged_as_the_artifact_computes_it(tmp_path, op,
                                                                        broadcast):
    """The gap form where an operand broadcasts; operands of one shape pooled exactly
    (``layers/_max_pairs.py``), which the reference must not round as a gap."""
    rng = np.random.default_rng(0)
    # large values: fp16's spacing (0.25 to 1) is a sizeable part of the int8 step
    calibration = {"x": (rng.standard_normal((8, C, HW, HW)) * 200).astype(np.float32)}
    result = mrvl_convert.convert(_model(op, broadcast), tmp_path / "a",
                                  quantize=Quantization(calibration, "minmax"))
    pick = next(e for e in result.placements if e["name"] == "pick")
    rule = "mrvl.max_min" if broadcast else "mrvl.max_pair"
    assert pick["placement"] == "mrvl" and pick["rule"] == rule  # the premise
    assert result.summary["mrvl_subgraphs"] == 1
    qdq = tmp_path / "a" / result.manifest["quantization"]["file"]
    feeds = [{"x": (rng.standard_normal((1, C, HW, HW)) * 200).astype(np.float32)}
             for _ in range(4)]
    comparison = mrvl_convert.compare(qdq, tmp_path / "a", feeds)
    assert comparison.passed, [(r.tensor, r.max_abs) for r in comparison.judged_rows]
    assert all(r.max_abs == 0 for r in comparison.judged_rows), \
        [(r.tensor, r.max_abs) for r in comparison.judged_rows]
