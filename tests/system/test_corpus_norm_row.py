"""The real corpus's rows of one model (benchmarks/real_corpus_runs.py) whose fp16 overflow is
no norm's: no "fp16 norm range" row repeating the fp16 figures with "0 norm(s) scaled", the fp16
row's note says that no norm overflows. Built here; nothing is downloaded (fetch replaced)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.benchmarks import bench_module

runs = bench_module("real_corpus_runs")
fetch = bench_module("real_corpus_fetch")

pytestmark = pytest.mark.system


def _overflowing_fc() -> onnx.ModelProto:
    """x [1, 8] times 1000, then by a matrix of 1000s: the products leave fp16's range (its
    constants do not); no norm in it."""
    weight = numpy_helper.from_array(np.full((8, 4), 1e3, np.float32), "w")
    gain = numpy_helper.from_array(np.array(1e3, np.float32), "gain")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "gain"], ["scaled"], name="gain"),
         helper.make_node("MatMul", ["scaled", "w"], ["y"], name="fc")], "fc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [weight, gain])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_no_norm_range_row_when_no_norm_overflows(tmp_path, monkeypatch):
    path = tmp_path / "fc.onnx"
    onnx.save(_overflowing_fc(), str(path))
    monkeypatch.setattr(runs, "fetch", lambda entry, cache: path)
    entry = fetch.Entry("pkg", "1", "wheel", "fc.onnx", "features")
    rows = runs.model_rows(entry, tmp_path, tmp_path / "work", samples=1, calibrate=1,
                           int8=False, foreign=False)
    assert [r["mode"] for r in rows] == ["fp16"]
    assert rows[0].get("overflow") and runs.NO_NORM in rows[0]["note"]
