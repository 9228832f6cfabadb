"""A model with a weight-only DequantizeLinear (quantize_dynamic's embedding table) is judged
against the model with the artifact's fp16 layers rounded; where the model's own float32 values
overflow fp16 (x * 100 squared in a hand-written LayerNorm), that reference overflows exactly as
the artifact does: both outputs are 0 where fp32's peak is about 2.5. On the old code verify said
PASS at max_rel 0 and ``--keep-fp32 auto`` kept nothing ("chosen on 4 samples: verify PASS
(max_rel 0)"); now no output passes against such a reference, and auto keeps the overflowing
nodes, after which the verdict is a real one."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.convert import convert_with
from mrvl_convert.options import ConvertOptions
from mrvl_convert.tune.keep_fp32 import VerifySettings, convert_keep_fp32


def _overflowing_norm(path: Path) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (16, 32)).astype(np.int8), "tq"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ts"),
             numpy_helper.from_array(np.array(0, np.int8), "tz"),
             numpy_helper.from_array(np.array(100.0, np.float32), "big"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
             numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "w")]
    nodes = [helper.make_node("DequantizeLinear", ["tq", "ts", "tz"], ["table"], name="dq"),
             helper.make_node("Gather", ["table", "ids"], ["e"], name="gather"),
             helper.make_node("MatMul", ["e", "w"], ["m"], name="mm"),
             helper.make_node("Mul", ["m", "big"], ["x"], name="scale"),
             helper.make_node("Pow", ["x", "two"], ["sq"], name="pow"),
             helper.make_node("ReduceMean", ["sq"], ["ms"], name="mean", axes=[-1]),
             helper.make_node("Add", ["ms", "eps"], ["v"], name="add"),
             helper.make_node("Sqrt", ["v"], ["r"], name="sqrt"),
             helper.make_node("Div", ["x", "r"], ["y"], name="div")]
    graph = helper.make_graph(nodes, "ovf", [helper.make_tensor_value_info("ids", TensorProto.INT64,
                                                                           [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _feeds(count: int):
    rng = np.random.default_rng(1)
    return [{"ids": rng.integers(0, 16, (1, 8)).astype(np.int64)} for _ in range(count)]


def test_a_reference_that_overflows_where_the_artifact_does_passes_nothing(tmp_path):
    model = _overflowing_norm(tmp_path / "ovf.onnx")
    convert_with(str(model), tmp_path / "out", ConvertOptions())
    comparison = VerifySettings(inputs=_feeds(4)).run(str(model), tmp_path / "out")
    assert "rounded to fp16" in comparison.reference  # the int8 path's reference
    assert comparison.overflow_nodes
    [row] = [r for r in comparison.rows if r.kind == "output"]
    assert not row.passed and "not judged" in row.note and not comparison.passed


def test_keep_fp32_auto_keeps_the_overflowing_nodes(tmp_path):
    model = _overflowing_norm(tmp_path / "ovf.onnx")
    result = convert_keep_fp32(str(model), None, "auto", verify=VerifySettings(inputs=_feeds(8)))
    assert {"pow", "mean", "add"} <= set(result.kept), result.line()
