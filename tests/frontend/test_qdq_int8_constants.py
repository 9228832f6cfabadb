"""A constant computed from the pinned sizes and quantized as an activation, read by an int8
layer (a YOLOv8 head's strides times its boxes), stays that layer's int8 weight: only its
QuantizeLinear is computed (``frontend/qdq.py``), exact."""
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


def _strided() -> onnx.ModelProto:
    """int8 ``x * steps``, the steps ``[1, L]`` (``8 * range(L)``) computed from x's length L
    (dynamic when quantized, so quantized as an activation)."""
    b = Builder(seed=0, opset=13)
    x = b.input("x", [1, 4, "L"])
    length = b.op("Gather", [b.op("Shape", [x]), b.const(np.array(2, np.int64))], axis=0)
    steps = b.op("Cast", [b.op("Range", [b.const(np.array(0, np.int64)), length,
                                         b.const(np.array(1, np.int64))])], to=TensorProto.FLOAT)
    steps = b.op("Unsqueeze", [b.op("Mul", [steps, b.const(np.array(8.0, np.float32))]),
                               b.const(np.array([0], np.int64))])
    y = b.op("Mul", [_qdq(b, x, 0.02), _qdq(b, steps, 0.5)], name="scaled")
    return b.model([_qdq(b, y, 0.4)])


def _run(model: onnx.ModelProto, feed):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feed)


def test_the_int8_layers_computed_constant_stays_a_qdq_weight():
    canonical = canonicalize(load_model(_strided(), shapes={"x": [1, 4, 8]}))
    scaled = next(n for n in canonical.graph.nodes if n.name == "scaled")
    weight = scaled.inputs[1].inputs[0]
    assert weight.op == "DequantizeLinear" and isinstance(weight.inputs[0], gs.Constant)
    assert weight.inputs[0].values.dtype == np.int8


def test_it_computes_what_the_qdq_model_computes_bit_for_bit():
    model = _strided()
    canonical = canonicalize(load_model(model, shapes={"x": [1, 4, 8]}))
    rewritten = gs.export_onnx(canonical.graph, do_type_check=False)
    rewritten.ir_version = 8
    feed = {"x": np.random.default_rng(0).uniform(-2, 2, (1, 4, 8)).astype(np.float32)}
    for got, want in zip(_run(rewritten, feed), _run(model, feed)):
        assert np.array_equal(got, want)
