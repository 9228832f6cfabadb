"""ai.onnx.ml Scaler (skl2onnx's feature scaling) as Add of -offset and Mul by scale: bit-equal
on onnxruntime, and a Scaler -> MLP model whole on Mrvl (on integ11: "no rule" for Scaler, one
Mrvl and one CPU subgraph)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from support.models import canonicalized, run_ort

OFFSET = [5.359, 0.0, 12.771, 75.48]
SCALE = [0.3548394, 1.0, 0.1471407, 0.0231742]


def _scaler_mlp(offset=OFFSET, scale=SCALE, dtype=TensorProto.FLOAT, rows=1) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal([4, 8]).astype(np.float32), "w0"),
               numpy_helper.from_array(rng.standard_normal([8]).astype(np.float32), "b0"),
               numpy_helper.from_array(rng.standard_normal([8, 1]).astype(np.float32), "w1")]
    nodes = [helper.make_node("Scaler", ["x"], ["scaled"], name="scaler", domain="ai.onnx.ml",
                              offset=offset, scale=scale),
             helper.make_node("MatMul", ["scaled", "w0"], ["h"], name="mm0"),
             helper.make_node("Add", ["h", "b0"], ["hb"], name="add0"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu0"),
             helper.make_node("MatMul", ["r", "w1"], ["y"], name="mm1")]
    graph = helper.make_graph(nodes, "scaler_mlp", [helper.make_tensor_value_info(
        "x", dtype, [rows, 4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                 [rows, 1])], weights)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])


def _feed(rows: int) -> dict:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal([rows, 4]) * 10.0 ** rng.integers(-3, 4, [rows, 4]))
    return {"x": x.astype(np.float32)}


@pytest.mark.parametrize("offset, scale", [(OFFSET, SCALE), ([1.5], [0.1])])
def test_scaler_is_add_and_mul_bit_equal(offset, scale):
    model = _scaler_mlp(offset, scale, rows=64)
    canonical, rewritten = canonicalized(model)
    assert "Scaler" not in {n.op for n in canonical.graph.nodes}
    assert "scaler" in canonical.rewritten
    for proto in (model, rewritten):  # the scaled features themselves compared too
        proto.graph.output.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT,
                                                                [64, 4]))
    feeds = _feed(64)
    want = run_ort(model, feeds, ["scaled", "y"])
    got = run_ort(rewritten, feeds, ["scaled", "y"])
    assert got["scaled"].tobytes() == want["scaled"].tobytes()
    assert got["y"].tobytes() == want["y"].tobytes()


def test_scaler_of_doubles_stays_and_says_why():
    canonical, _ = canonicalized(_scaler_mlp(dtype=TensorProto.DOUBLE))
    assert "Scaler" in {n.op for n in canonical.graph.nodes}
    assert "float32" in canonical.kept["scaler"]


def test_scaler_mlp_is_whole_on_mrvl_and_verifies(tmp_path):
    model = _scaler_mlp()
    result = mrvl_convert.convert(model, tmp_path / "art")
    summary = result.report["summary"]
    assert summary["mrvl_subgraphs"] == 1 and summary["cpu_nodes"] == 0, summary
    assert mrvl_convert.compare(model, tmp_path / "art", samples=2).passed
