"""A node reading one DequantizeLinear in two inputs (an int8 ``Mul(x, x)``) gets a copy per
input from ``frontend/qdq.py``'s ``dedicate_dequantize``: on integ10 both inputs read one copy,
no int8 rule matched the DequantizeLinear read twice by its Mul, and the square was cut to CPU."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper

import mrvl_convert
from mrvl_convert.core.graph import same_value
from mrvl_convert.frontend.qdq import dedicate_dequantize
from mrvl_convert.quantize import Quantization
from support.models import Builder

C = 16


def _dq_read_twice() -> gs.Graph:
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["x"], name="dq"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mul", ["x", "x"], ["y"], name="sq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("q", TensorProto.INT8,
                                                                         [1, C])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, C])],
                              [scale])
    return gs.import_onnx(helper.make_model(graph))


def test_each_input_reading_a_dequantize_gets_its_own_copy():
    graph = _dq_read_twice()
    copies = dedicate_dequantize(graph)
    assert sorted(copies) == ["dq_for_sq", "dq_for_sq_in1"]
    names = [n.name for n in graph.nodes]
    assert len(names) == len(set(names))
    sq = next(n for n in graph.nodes if n.name == "sq")
    a, b = sq.inputs
    assert a is not b and all(len(t.outputs) == 1 for t in (a, b)) and same_value(a, b)


def test_an_int8_square_runs_whole_and_verifies(tmp_path):
    b = Builder(seed=5)
    a = b.gemm(b.input("x", [1, C]), C, C)
    model = b.model([b.gemm(b.op("Mul", [a, a], name="square"), C, C)])
    rng = np.random.default_rng(1)
    calibration = {"x": rng.uniform(-2, 2, (16, C)).astype(np.float32)}
    result = mrvl_convert.convert(model, tmp_path / "o", quantize=Quantization(calibration))
    assert [e["name"] for e in result.report["nodes"]
            if e["placement"] not in ("mrvl", "removed")] == []
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    feeds = [{"x": rng.uniform(-2, 2, (1, C)).astype(np.float32)} for _ in range(4)]
    assert mrvl_convert.compare(qdq, result.out_dir, feeds).passed
