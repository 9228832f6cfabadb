"""Helpers of the int8 tests: QDQ models quantized with Marvell's recipe, onnxruntime running
them as their reference, and the error counted in int8 steps of the output."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization
from mrvl_convert.quantize.recipe import quantize_int8

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_cnn"


def converted_int8(model: onnx.ModelProto, out: Path, span: float = 1.0
                   ) -> Tuple["mrvl_convert.Result", Path]:
    """``model`` converted with Marvell's recipe on 16 seeded calibration samples uniform in
    [-span, span] of its first input's shape: (result, the QDQ file the artifact keeps)."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    calibration = {model.graph.input[0].name:
                   rng.uniform(-span, span, [16] + shape[1:]).astype(np.float32)}
    result = mrvl_convert.convert(model, out, quantize=Quantization(calibration))
    return result, result.out_dir / result.manifest["quantization"]["file"]


def output_scale(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear writing the model's (first) output: one int8 step."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear"
    return float(inits[node.input[1]].reshape(-1)[0])


# onnxruntime before 1.19 quantizes a Relu with a scale of its own: the int8 layer before the
# requant that follows carries no source_nodes (the requant names the composite's nodes), so
# tests that pair or map layers by their source nodes do not apply there.
needs_relu_sharing_scale = pytest.mark.skipif(
    tuple(int(v) for v in ort.__version__.split(".")[:2]) < (1, 19),
    reason="an int8 layer before a requant names no source node (onnxruntime < 1.19)")


def reference_session(qdq: Path, fused: bool = False) -> ort.InferenceSession:
    """onnxruntime running the QDQ model. By default op by op as the model writes it
    (DequantizeLinear, the float op, QuantizeLinear: ``session.disable_quant_qdq``), the
    model's own semantics. ``fused``: with onnxruntime's int8 kernels (QLinearConv, ...), which
    equal that on ARM and on x86 with VNNI, but on x86 with AVX2 only turn int8 activations into
    uint8 and sum pairs of products in saturating int16 (``vpmaddubsw``), onnxruntime's documented
    reason to quantize weights with ``reduce_range`` there: off by many steps, by design."""
    options = ort.SessionOptions()
    if not fused:
        options.add_session_config_entry("session.disable_quant_qdq", "1")
    return ort.InferenceSession(str(qdq), options, providers=["CPUExecutionProvider"])


def run_both(qdq: Path, artifact: Path, feeds: List[Dict[str, np.ndarray]], fused: bool = False
             ) -> Tuple[np.ndarray, np.ndarray]:
    hybrid = mrvl_convert.HybridSession(artifact)
    reference = reference_session(qdq, fused)
    got = np.stack([hybrid.run(None, feed)[0] for feed in feeds])
    want = np.stack([reference.run(None, feed)[0] for feed in feeds])
    return got, want


def steps(got: np.ndarray, want: np.ndarray, scale: float) -> np.ndarray:
    """|got - want| in int8 steps of the output (both are multiples of the scale)."""
    return np.rint(np.abs(got.astype(np.float64) - want) / scale)


def placements(result) -> Dict[str, Dict]:
    return {n["name"]: n for n in result.report["nodes"]}


def float_model(nodes, inits: Dict[str, np.ndarray], x_shape, out_shape) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def quantized(tmp_path: Path, model: onnx.ModelProto, x_shape, seed: int = 0, samples: int = 12,
              **recipe) -> Tuple[Path, List[Dict[str, np.ndarray]]]:
    """The model quantized with Marvell's recipe on seeded random calibration samples, and
    fresh seeded inputs to compare on."""
    rng = np.random.default_rng(seed)
    src = tmp_path / "float.onnx"
    onnx.save(model, src)
    qdq = tmp_path / "qdq.onnx"
    calibration = {"x": rng.standard_normal((16 * x_shape[0], *x_shape[1:])).astype(np.float32)}
    if recipe:
        _quantize_with(src, qdq, calibration, **recipe)
    else:
        quantize_int8(src, qdq, calibration)
    feeds = [{"x": rng.standard_normal(x_shape).astype(np.float32)} for _ in range(samples)]
    return qdq, feeds


def _quantize_with(src: Path, out: Path, calibration, **recipe) -> None:
    """quantize_static with Marvell's recipe changed by ``recipe`` (for the CPU-fallback cases)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"x": s[None]} for s in calibration["x"]])

        def get_next(self):
            return next(self.it, None)

    options = {"per_channel": False, "extra_options": {"ActivationSymmetric": True,
                                                        "WeightSymmetric": True}}
    options.update(recipe)
    quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QInt8, **options)
