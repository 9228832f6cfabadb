"""A Sum of two written as an Add before quantizing (``quantize/sums.py``): quantize_static then
quantizes it, so the int8 model has no float Sum; a Sum of three, or one left in float
(``--keep-fp16``), stays as it is."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.quantize.sums import sums_as_add


def _model(operands: int) -> onnx.ModelProto:
    """Conv, then Sum of the conv and the input (and the input again), then Relu and a Conv."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), w)
             for w in ("w1", "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv"),
             helper.make_node("Sum", ["c"] + ["x"] * (operands - 1), ["s"], name="sum"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="head")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _ops_named(model: onnx.ModelProto, name: str) -> List[str]:
    return [n.op_type for n in model.graph.node if n.name == name]


def test_a_sum_of_two_is_an_add_and_keeps_its_name():
    assert _ops_named(sums_as_add(_model(2)), "sum") == ["Add"]
    assert _ops_named(sums_as_add(_model(3)), "sum") == ["Sum"]
    assert _ops_named(sums_as_add(_model(2), keep={"sum"}), "sum") == ["Sum"]


def test_the_quantized_sum_reads_and_writes_int8(tmp_path: Path):
    onnx.save(_model(2), tmp_path / "float.onnx")
    calibration = np.random.default_rng(1).uniform(-1, 1, (8, 4, 5, 5)).astype(np.float32)
    qdq = onnx.load(quantize_int8(tmp_path / "float.onnx", tmp_path / "qdq.onnx",
                                  {"x": calibration}))
    producers = {o: n for n in qdq.graph.node for o in n.output}
    add = next(n for n in qdq.graph.node if n.name == "sum")
    assert add.op_type == "Add"
    assert [producers[i].op_type for i in add.input] == ["DequantizeLinear"] * 2
    readers = [n.op_type for n in qdq.graph.node if add.output[0] in n.input]
    assert readers == ["QuantizeLinear"]
