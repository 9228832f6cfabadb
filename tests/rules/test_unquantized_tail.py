"""An op that reads dequantized int8 and whose result leaves the int8 region unquantized (a
classifier's last Sigmoid written as the model output, smart-turn's) runs as an fp16 layer after
the dequantizing quant layer (``checks_elementwise._leaves_unquantized``); on integ11 it was
refused as "in an int8 (QDQ) region", a CPU stage at the end. One whose result is quantized
again stays refused."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_graphsurgeon as gs

import mrvl_convert
from mrvl_convert.rules.checks_elementwise import check_float_region


def _qdq_head(tail: str, requantized: bool = False) -> onnx.ModelProto:
    """x -> Q/DQ -> Gemm(DQ(int8 w), DQ(int32 b)) -> Q/DQ -> ``tail`` -> y (-> Q/DQ when
    ``requantized``), per-tensor symmetric int8 throughout."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, [16, 4]).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w_q"),
             numpy_helper.from_array(np.array(0.01, np.float32), "w_s"),
             numpy_helper.from_array(np.array(0.02, np.float32), "x_s"),
             numpy_helper.from_array(np.array(0.05, np.float32), "h_s"),
             numpy_helper.from_array(np.array(1 / 127, np.float32), "y_s"),
             numpy_helper.from_array(np.array(0, np.int8), "zp"),
             numpy_helper.from_array(rng.integers(-500, 500, [4]).astype(np.int32), "b_q"),
             numpy_helper.from_array(np.array(0.02 * 0.01, np.float32), "b_s"),
             numpy_helper.from_array(np.array(0, np.int32), "b_zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "zp"], ["xq"], name="xq"),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "zp"], ["xd"], name="xd"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "zp"], ["wd"], name="wd"),
             helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_zp"], ["bd"], name="bd"),
             helper.make_node("Gemm", ["xd", "wd", "bd"], ["hb"], name="fc"),
             helper.make_node("QuantizeLinear", ["hb", "h_s", "zp"], ["hq"], name="hq"),
             helper.make_node("DequantizeLinear", ["hq", "h_s", "zp"], ["hd"], name="hd"),
             helper.make_node(tail, ["hd"], ["t" if requantized else "y"], name="tail")]
    if requantized:
        nodes += [helper.make_node("QuantizeLinear", ["t", "y_s", "zp"], ["tq"], name="tq"),
                  helper.make_node("DequantizeLinear", ["tq", "y_s", "zp"], ["y"], name="td")]
    graph = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("tail", ["Sigmoid", "Tanh"])
def test_unquantized_tail_is_an_fp16_layer_and_verifies(tail, tmp_path):
    model = _qdq_head(tail)
    result = mrvl_convert.convert(model, tmp_path / "art")
    placement = {e["name"]: e for e in result.report["nodes"]}
    assert placement["tail"]["placement"] == "mrvl", placement["tail"].get("reason")
    summary = result.report["summary"]
    assert summary["mrvl_subgraphs"] == 1 and summary["cpu_nodes"] == 0, summary
    assert mrvl_convert.compare(model, tmp_path / "art", samples=4).passed


@pytest.mark.parametrize("requantized, refused", [(False, False), (True, True)])
def test_float_region_check_on_the_tail(requantized, refused):
    graph = gs.import_onnx(_qdq_head("Sigmoid", requantized=requantized))
    tail = next(n for n in graph.nodes if n.name == "tail")
    details = check_float_region(tail, {}, graph)
    assert (details is not None) == refused, details


def test_a_tail_also_read_by_a_quantizer_stays_refused():
    """The model output is one reader; a QuantizeLinear reading it too is int8 again."""
    model = _qdq_head("Sigmoid")
    model.graph.node.append(helper.make_node("QuantizeLinear", ["y", "y_s", "zp"], ["yq"],
                                             name="yq"))
    model.graph.node.append(helper.make_node("DequantizeLinear", ["yq", "y_s", "zp"], ["z"],
                                             name="yd"))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4]))
    graph = gs.import_onnx(model)
    tail = next(n for n in graph.nodes if n.name == "tail")
    assert "dequantized int8" in check_float_region(tail, {}, graph)["detail"]
