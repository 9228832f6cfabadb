"""A QDQ model runs as written on every session the library opens for it (CPU stages and the
verify reference): onnxruntime's DoubleQDQPairsRemover, which ``session.disable_quant_qdq``
leaves on, must not merge Q(s1) -> DQ(s1) -> Q(s2) -> DQ(s2) into one pair (LEADER, issue 45:
its int8 artifact was 4 steps off its own QDQ model where a Concat split per input left such
a chain between two cancelling Transposes)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization
from mrvl_convert.runtime.options import cpu_session_options, ort_options, qdq_as_written
from support.models import Builder

S1, S2 = 0.1, 0.15  # two scales whose double rounding differs from any single one


def _double_pair() -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(s, np.float32), f"s{k}") for k, s in
             ((1, S1), (2, S2))] + [numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z"], ["d1"]),
             helper.make_node("QuantizeLinear", ["d1", "s2", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [64])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _as_written(x: np.ndarray) -> np.ndarray:
    q1 = np.clip(np.rint(x / np.float32(S1)), -128, 127).astype(np.float32) * np.float32(S1)
    return np.clip(np.rint(q1 / np.float32(S2)), -128, 127).astype(np.float32) * np.float32(S2)


def test_a_double_pair_is_rounded_twice_as_the_model_writes():
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    want = _as_written(x)
    for options in (qdq_as_written(ort_options()), cpu_session_options(1)):
        session = ort.InferenceSession(_double_pair().SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        assert np.array_equal(session.run(None, {"x": x})[0], want)


def _joined_on_batch() -> onnx.ModelProto:
    """Three conv branches swapped to [C, 1, H, W], joined on axis 0 and swapped back: the
    form of LEADER's dilated-attention join (``attention_dconc``)."""
    b = Builder(seed=3, opset=13)
    x = b.input("x", [1, 4, 8, 8])
    parts = [b.op("Transpose", [b.op("Tanh", [b.conv(x, 4, 4, k=3, pads=[1, 1, 1, 1])])],
                  perm=[1, 0, 2, 3]) for _ in range(3)]
    joined = b.op("Transpose", [b.op("Concat", parts, axis=0)], perm=[1, 0, 2, 3])
    return b.model([b.conv(joined, 12, 4, k=1)])


def test_an_int8_join_on_the_batch_axis_is_bit_equal_to_its_qdq_model(tmp_path: Path):
    rng = np.random.default_rng(0)
    calibration = {"x": rng.standard_normal((16, 4, 8, 8)).astype(np.float32)}
    result = mrvl_convert.convert(_joined_on_batch(), tmp_path / "o",
                                  quantize=Quantization(calibration))
    assert result.summary["cpu_subgraphs"] >= 1  # the join runs on the CPU, in onnxruntime
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    feeds = [{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(8)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
    assert comparison.passed
    assert [row.max_abs for row in comparison.judged_rows] == [0.0]
