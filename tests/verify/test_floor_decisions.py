"""The fp16 floor rounds the network in front of a decision (slanet-plus, issue 45): the tensors
verify never rounds were followed back from every shape/index slot through every producer, so
a decoder Loop whose step count ends a Slice put the Loop's float inputs, and the whole backbone
in front of them, among the "sizes". slanet-plus's floor rounded nothing before its Loop: 0.0044
of the output's peak against an artifact at 0.042 ("10x: a converter defect"), while rounding
the backbone alone costs 0.021. The same held for an ArgMax (or TopK) whose index a Gather
reads. The cone now stops at a decision's float data (``value_tensors.DECISIONS``): the floor of
such a model is the floor of its twin whose index is a constant, bit for bit."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.fp16_floor import floor_model, fp16_floor
from mrvl_convert.verify.value_tensors import never_rounded
from support.models import Builder, run_ort

CHANNELS = 4


def _counting_body() -> onnx.GraphProto:
    """count + 1 and the features halved, each step (the halving is exact in fp16)."""
    nodes = [helper.make_node("Add", ["count_in", "step"], ["count_out"]),
             helper.make_node("Mul", ["v_in", "half"], ["v_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "step"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    value = helper.make_tensor_value_info
    return helper.make_graph(
        nodes, "body",
        [value("i", TensorProto.INT64, []), value("cond_in", TensorProto.BOOL, []),
         value("count_in", TensorProto.INT64, [1]), value("v_in", TensorProto.FLOAT, [1, CHANNELS, 8, 8])],
        [value("cond_out", TensorProto.BOOL, []), value("count_out", TensorProto.INT64, [1]),
         value("v_out", TensorProto.FLOAT, [1, CHANNELS, 8, 8])], inits)


def _backbone(b: Builder) -> str:
    """x -> Conv -> Relu -> Conv: float data a device computes in fp16."""
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("Relu", [b.conv(x, 3, CHANNELS, pads=[1, 1, 1, 1])], name="relu")
    return b.conv(y, CHANNELS, CHANNELS, pads=[1, 1, 1, 1])


def counted_loop(constant_end: bool = False) -> Tuple[onnx.ModelProto, str]:
    """The backbone's features carried through a 2-step Loop that also counts its steps; the
    count ends a Slice of the Loop's features (slanet-plus's form). With ``constant_end``, the
    Slice ends at the constant 2 instead: the twin whose floor the Loop's must equal. Returns
    the model and the name of the Loop's features."""
    b = Builder(3, opset=13)
    feat = _backbone(b)
    b.nodes.append(helper.make_node(
        "Loop", [b.const(np.array(2, np.int64)), b.const(np.array(True)),
                 b.const(np.array([0], np.int64)), feat], ["count", "last"],
        body=_counting_body(), name="decoder"))
    end = b.const(np.array([2], np.int64)) if constant_end else "count"
    y = b.op("Slice", ["last", b.const(np.array([0], np.int64)), end,
                       b.const(np.array([1], np.int64))], name="head")
    return b.model([y], name="counted", shapes={y: [1, 2, 8, 8]}), feat


def argmax_pick() -> Tuple[onnx.ModelProto, str]:
    """The backbone's features, and the value at each pixel's ArgMax over channels picked by
    GatherElements (a detector's best class score)."""
    b = Builder(4, opset=13)
    feat = _backbone(b)
    index = b.op("ArgMax", [feat], axis=1, keepdims=1, name="best")
    picked = b.op("GatherElements", [feat, index], axis=1, name="pick")
    return b.model([picked], name="picked"), feat


def _feeds(count: int = 3):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(count)]


def _floor(model: onnx.ModelProto):
    name = model.graph.output[0].name
    feeds = _feeds()
    want = {name: [run_ort(model, f)[name] for f in feeds]}
    return fp16_floor(model, "m.onnx", [name], feeds, want).outputs[name]


def test_a_loops_step_count_in_a_slice_protects_only_the_count():
    model, feat = counted_loop()
    kept = never_rounded(model)
    assert "count" in kept  # the Slice's end: a size
    assert feat not in kept and "relu_out" not in kept and "x" not in kept


def test_an_argmaxs_index_in_a_gather_protects_only_the_index():
    model, feat = argmax_pick()
    kept = never_rounded(model)
    assert "best_out" in kept
    assert feat not in kept and "relu_out" not in kept


def test_the_floor_rounds_the_backbone_in_front_of_a_loop():
    """Bit-equal to the constant-end twin's floor, which rounds every backbone tensor; on the
    old cone the Loop model's floor was the output's own rounding only, far below."""
    model, _ = counted_loop()
    twin, _ = counted_loop(constant_end=True)
    got, want = _floor(model), _floor(twin)
    assert want.max_abs > 0
    assert [s[0] for s in got.samples] == [s[0] for s in want.samples]


def test_the_floor_rounds_the_backbone_in_front_of_an_argmax():
    model, _ = argmax_pick()
    rounded = run_ort(floor_model(model), _feeds(1)[0])["pick_out"]
    # the pick rounded where it was computed: every value is an fp16 value of the rounded
    # network, not the fp32 one rounded once at the end
    fp32 = run_ort(model, _feeds(1)[0])["pick_out"]
    assert not np.array_equal(rounded, fp32.astype(np.float16).astype(np.float32))
    assert _floor(model).max_abs > 0


def test_verify_judges_the_loop_model_against_the_backbones_floor(tmp_path):
    """Converted (the backbone on Mrvl, the Loop on CPU), the output's floor is the twin's: the
    verdict's "N x the floor" is measured against what rounding the backbone costs."""
    model, _ = counted_loop()
    twin, _ = counted_loop(constant_end=True)
    feeds = _feeds()
    mrvl_convert.convert(model, tmp_path / "art")
    row = compare(model, tmp_path / "art", feeds).judged_rows[0]
    assert row.floor_max_abs is not None
    assert row.floor_max_abs == _floor(twin).max_abs > 0
