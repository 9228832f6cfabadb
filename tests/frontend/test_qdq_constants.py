"""Quantized pairs on paths that are constant once the input shapes are fixed are computed at
conversion time (``frontend/qdq.py``), as onnxruntime computes them; a QDQ weight stays."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
from onnx import TensorProto

from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import Builder


def _qdq(b: Builder, x: str, scale: float) -> str:
    s, z = b.const(np.float32(scale)), b.const(np.int8(0))
    return b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, s, z]), s, z])


def _dq(b: Builder, values: np.ndarray, scale: float) -> str:
    return b.op("DequantizeLinear", [b.const(values.astype(np.int8)),
                                     b.const(np.float32(scale)), b.const(np.int8(0))])


def anchored(batch: object = 1) -> onnx.ModelProto:
    """An activation scaled by anchors computed from its own shape, quantized as onnxruntime's
    quantize_static writes them (the path was not constant when quantized: the length was
    dynamic), beside three convolutions whose QDQ weights must stay: an int8 initializer, and a
    float one with its QuantizeLinear (as other tools write QDQ weights), as an initializer and
    as a Constant node."""
    b = Builder(seed=2, opset=13)
    x = b.input("x", [batch, 4, 8])
    n = b.op("Gather", [b.op("Shape", [x]), b.const(np.int64(2))], axis=0)
    steps = b.op("Cast", [b.op("Range", [b.const(np.int64(0)), n, b.const(np.int64(1))])],
                 to=TensorProto.FLOAT)
    anchors = b.op("Add", [_qdq(b, steps, 0.07), _dq(b, np.array([5]), 0.1)])
    y = b.op("Mul", [x, _qdq(b, anchors, 0.07)], name="scaled")
    image = b.op("Reshape", [_qdq(b, y, 0.05), b.const(np.array([1, 4, 8, 1], np.int64))])
    weight = np.random.default_rng(3).integers(-100, 100, (3, 4, 1, 1))
    int8_conv = b.op("Conv", [_qdq(b, image, 0.05), _dq(b, weight, 0.01)], name="int8_weight",
                     kernel_shape=[1, 1])
    float_conv = b.op("Conv", [_qdq(b, image, 0.05),
                               _qdq(b, b.const((weight * 0.01).astype(np.float32)), 0.01)],
                      name="float_weight", kernel_shape=[1, 1])
    node_weight = b.op("Constant", [], value=onnx.numpy_helper.from_array(
        (weight * 0.01).astype(np.float32), "node_weight_value"))  # as Paddle writes weights
    node_conv = b.op("Conv", [_qdq(b, image, 0.05), _qdq(b, node_weight, 0.01)],
                     name="node_weight", kernel_shape=[1, 1])
    return b.model([int8_conv, float_conv, node_conv])


def _run(model: onnx.ModelProto, feed):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feed)


def test_the_constant_paths_pairs_are_computed_and_the_weights_pairs_stay():
    model = anchored("N")
    canonical = canonicalize(load_model(model, shapes={"x": [1, 4, 8]}))
    nodes = {n.name: n for n in canonical.graph.nodes}
    assert isinstance(nodes["scaled"].inputs[1], gs.Constant)
    for conv in ("int8_weight", "float_weight", "node_weight"):
        weight = nodes[conv].inputs[1]
        assert weight.inputs and weight.inputs[0].op == "DequantizeLinear", conv
    assert nodes["float_weight"].inputs[1].inputs[0].inputs[0].inputs[0].op == "QuantizeLinear"
    exported = gs.export_onnx(canonical.graph, do_type_check=False)
    exported.ir_version = 8
    feed = {"x": np.random.default_rng(0).standard_normal((1, 4, 8)).astype(np.float32)}
    for got, want in zip(_run(exported, feed), _run(model, feed)):
        assert np.array_equal(got, want)
