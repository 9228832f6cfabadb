"""The fp16 floor computes a Max/Min the artifact runs on Mrvl as the device's lowering does
(``verify/floor_minmax.py`` after ``layers/_minmax.py``: ``o + Relu(f - o)``, the gap rounded).
deepcut's chain of eleven Keras Maximums made its verdict "far above the fp16 floor (5x): a
converter defect" on integ11, though the artifact without the simulator's rounding matches
onnxruntime within 4e-7: the floor's Max of two rounded values never rounds, the device's
lowering does. Here a Max (Min) of operands about 1000 apart: the gap's rounding costs up to
0.25 where the floor of integ11 cost 5e-4 (76x, "a converter defect")."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.verify.fp16_floor import floor_model
from mrvl_convert.verify.report import Row, floor_excess, judge

C, HW = 4, 8


def _far_apart(op: str) -> onnx.ModelProto:
    """``op`` of two 1x1 Convs, ``f`` (all channels) and ``o`` (one channel, broadcasting: two
    operands of one shape are pooled exactly, ``layers/_max_pairs.py``), one shifted 1000 away
    by its bias, so that the operand picked is ``f`` (input 0 of the lowering) for Max and the
    gap ``f - o`` is about 1000."""
    rng = np.random.default_rng(3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, HW, HW])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, HW, HW])
    inits = [numpy_helper.from_array((rng.standard_normal((out, C, 1, 1)) * 0.5)
                                     .astype(np.float32), f"w{k}")
             for k, out in enumerate((C, 1))]
    # Max: o far below, f picked; Min: f far above, o picked; f - o ~ 1000 either way
    inits.append(numpy_helper.from_array(np.full((C,), 0.0 if op == "Max" else 1000.0,
                                                 np.float32), "bias_f"))
    inits.append(numpy_helper.from_array(np.full((1,), -1000.0 if op == "Max" else 0.0,
                                                 np.float32), "bias_o"))
    nodes = [helper.make_node("Conv", ["x", "w0", "bias_f"], ["a"], name="conv_a"),
             helper.make_node("Conv", ["x", "w1", "bias_o"], ["b"], name="conv_far"),
             helper.make_node(op, ["a", "b"], ["y"], name="pick")]
    return helper.make_model(helper.make_graph(nodes, "far_minmax", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, feed: dict) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def _half(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_the_floor_computes_max_min_as_the_lowering_does(op):
    """Bit-equal to the lowering's arithmetic on the rounded operands (integ11: the exact
    max/min of the rounded operands)."""
    model = _far_apart(op)
    feed = {"x": np.random.default_rng(0).standard_normal((1, C, HW, HW)).astype(np.float32)}
    inner = onnx.ModelProto()
    inner.CopyFrom(model)
    inner.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                               for n in ("a", "b")])
    floor_inner = floor_model(inner, ["a", "b"])  # the floor's own rounded operands
    session = ort.InferenceSession(floor_inner.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    a, b = session.run(["a", "b"], feed)
    f, o = a, b
    gap = _half(np.maximum(f - o, 0))
    want = _half(o + gap) if op == "Max" else _half(f - gap)
    got = _run(floor_model(model), feed)
    assert np.array_equal(got, want)
    exact = _half(np.maximum(a, b) if op == "Max" else np.minimum(a, b))
    assert float(np.abs(got - exact).max()) > 0.01  # the lowering's cost is there


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_a_lowered_max_min_is_not_called_a_converter_defect(tmp_path, op):
    model = _far_apart(op)
    result = mrvl_convert.convert(model, tmp_path / "a")
    pick = next(e for e in result.placements if e["name"] == "pick")
    assert pick["placement"] == "mrvl"  # the premise: the device's lowering computes it
    comparison = mrvl_convert.compare(model, tmp_path / "a")
    row = comparison.judged_rows[0]
    assert not row.passed and row.max_abs > 0.1  # the lowering's cost, over tolerance
    # integ11: floor max_abs ~0.003, "far above the fp16 floor (76x): a converter defect"
    assert row.floor_max_abs >= row.max_abs / 3, (row.max_abs, row.floor_max_abs)
    said = judge(row.max_abs, row.floor_max_abs, floor_excess(row))
    assert said.startswith("within 3x the fp16 floor"), said
    assert "converter defect" not in comparison.summary_line()


def test_a_max_onnxruntime_computes_on_cpu_is_not_lowered_in_the_floor(tmp_path):
    """Only the Max/Min the artifact runs on Mrvl: onnxruntime's on CPU is exact."""
    model = _far_apart("Max")
    cpu = mrvl_convert.convert(model, tmp_path / "cpu", keep_fp32=["pick"])
    assert next(e for e in cpu.placements if e["name"] == "pick")["placement"] == "cpu"
    row = mrvl_convert.compare(model, tmp_path / "cpu").judged_rows[0]
    assert row.passed and row.floor_max_abs < 0.01, row.floor_max_abs


def test_a_floor_within_tolerance_in_every_sample_is_not_called_outside_it():
    """deepcut's floor max_rel 0.0217 was a near-zero sample's (abs 1.7e-6, below atol), its
    max_abs 2.4e-3 another's, within 0.01 of that sample's peak: every sample passed, and the
    verdict said "the floor itself is outside tolerance". Judged per sample now."""
    tol = {"max_rel": 0.01, "min_cosine": 0.999, "min_top1": 0.99, "reason": "",
           "atol": 2.0 ** -12}
    row = Row("dense_13", "output", [1, 1], 4.2e-3, 0.0163, tolerance=tol,
              floor_max_abs=2.4e-3, floor_max_rel=0.0217, floor_passes=True)
    assert floor_excess(row) is None
    row.floor_passes = False
    assert floor_excess(row) == "max_rel 0.0217 > 0.01"
