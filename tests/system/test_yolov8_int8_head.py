"""A YOLOv8 detector quantized with Marvell's recipe runs whole on the accelerator, its box
decoding head included, as its fp16 twin does (tests/support/yolov8_head.py: the head as the
ultralytics exporter writes it, anchors and strides computed from the feature maps' sizes).

Three mechanisms, each exact: the scales' Concat moves past the DFL's 1x1 Conv whose weight is
a QDQ weight (``frontend/concat_sinking.py``), the head's Split of that Concat undoes it through
the QDQ pairs between (same module), and the strides, a constant only once the sizes are
pinned, stay the int8 weight of the int8 Mul that reads them (``frontend/qdq.py``). Verify's
reference rounds the anchors where the artifact's fp16 Sum2D holds them
(``verify/value_tensors.py``: a dequantized value is data, not a size).
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest

import mrvl_convert
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from mrvl_convert.quantize import Quantization
from support.yolov8_head import YOLOV8_SHAPES, yolov8_detect

pytestmark = pytest.mark.system


def _images(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, [count] + YOLOV8_SHAPES["images"][1:]).astype(np.float32)


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return yolov8_detect()


@pytest.fixture(scope="module")
def converted(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("yolov8") / "int8"
    result = mrvl_convert.convert(model, out, shapes=YOLOV8_SHAPES,
                                  quantize=Quantization({"images": _images(16, 0)}))
    return result, out / result.manifest["quantization"]["file"]


def _run(model: onnx.ModelProto, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """onnxruntime, op by op as written (no fusion of the QDQ pairs)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feed)


def test_the_int8_detector_is_one_mrvl_subgraph_with_nothing_on_cpu(converted):
    result, _ = converted
    cpu = [(e["op_type"], e["name"]) for e in result.report["nodes"] if e["placement"] == "cpu"]
    assert cpu == [], cpu
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    assert result.report["precision"]["shares"]["int8"] == 1.0


def test_verify_against_the_qdq_model_passes(converted):
    result, qdq = converted
    feeds = [{"images": image[None]} for image in _images(3, 5)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
    assert comparison.passed, [(r.tensor, r.max_abs) for r in comparison.judged_rows]


def test_the_rewritten_head_computes_the_qdq_model_bit_for_bit(converted):
    _, qdq = converted
    given = onnx.load(str(qdq))
    canonical = canonicalize(load_model(given, shapes=YOLOV8_SHAPES))
    nodes = {n.name: n for n in canonical.graph.nodes}
    # no Concat left on a 4-D tensor's non-channel axis (the DFL Conv's input), the strides an
    # int8 weight, each DFL Conv copy with its own dequantized weight
    assert not any(n.op == "Concat" and len(n.outputs[0].shape) == 4
                   and n.attrs["axis"] % 4 != 1 for n in canonical.graph.nodes)
    strides = nodes["box_scale"].inputs[1].inputs[0]
    assert strides.op == "DequantizeLinear" and isinstance(strides.inputs[0], gs.Constant)
    assert strides.inputs[0].values.dtype == np.int8
    convs = [n for n in canonical.graph.nodes if n.name.startswith("dfl_conv")
             and n.op == "Conv"]
    weights = [c.inputs[1].inputs[0] for c in convs]
    assert len(convs) == 2 and all(w.op == "DequantizeLinear" for w in weights)
    assert weights[0] is not weights[1]
    rewritten = gs.export_onnx(canonical.graph, do_type_check=False)
    rewritten.ir_version = given.ir_version
    for image in _images(3, 7):
        feed = {"images": image[None]}
        for got, want in zip(_run(rewritten, feed), _run(given, feed)):
            assert np.array_equal(got, want)
