"""Real mobile networks stay one accelerator subgraph in int8, and compute what onnxruntime
computes for their QDQ model, exactly.

MobileNetV2 and MobileNetV3-small (the corpus's), a face-landmark-like PRelu net (Conv -> PRelu
blocks, per-channel slopes) and a small U-Net (Conv/Relu down, MaxPool, nearest Resize up,
Concat skip connections), built here with seeded weights; each is one Mrvl subgraph in fp16,
quantized by Marvell's recipe (``Quantization``, 16 seeded calibration samples in [-1, 1]) it
is one Mrvl subgraph with no CPU part in int8 too, no layer's form is inexact (report.json has
no ``int8_forms``), and its output is onnxruntime's run of the QDQ model as written, to the
bit, on 20 seeded inputs in the default run and on 200 under ``-m slow``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization

_TESTS = Path(__file__).resolve().parents[2]
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))


def _corpus(name: str) -> onnx.ModelProto:
    """The corpus's model, read-only, wherever the test helpers live now."""
    try:
        from support import corpus, corpus_mobile
    except ImportError:
        import corpus
        import corpus_mobile
    return corpus_mobile.mobilenet_v3_small() if name == "mobilenet_v3_small" \
        else corpus.built(name)


class _Net:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []

    def const(self, value: np.ndarray) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def op(self, op_type: str, inputs: List[str], **attrs) -> str:
        name = f"{op_type.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1) -> str:
        w = self.rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5
        b = self.rng.standard_normal(cout) * 0.1
        return self.op("Conv", [x, self.const(w), self.const(b)], kernel_shape=[k, k],
                       strides=[stride, stride], pads=[k // 2] * 4)

    def model(self, shape: List[int], y: str, name: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=8)
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def prelu_net(seed: int = 0) -> onnx.ModelProto:
    """Face-landmark-like: Conv -> PRelu (per-channel slopes) blocks, global pooling, an FC to
    68 (x, y) landmarks."""
    net = _Net(seed)
    y = "x"
    for cin, cout, stride in ((3, 16, 2), (16, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2)):
        slope = net.const(net.rng.uniform(0.05, 0.4, (cout, 1, 1)))
        y = net.op("PRelu", [net.conv(y, cin, cout, stride=stride), slope])
    y = net.op("Flatten", [net.op("GlobalAveragePool", [y])], axis=1)
    w = net.rng.standard_normal((136, 64)) * 0.1
    y = net.op("Gemm", [y, net.const(w), net.const(np.zeros(136))], transB=1)
    return net.model([1, 3, 64, 64], y, "prelu_net")


def unet(seed: int = 0) -> onnx.ModelProto:
    """Two levels down (Conv/Relu, MaxPool), two up (nearest Resize x2, Concat with the skip
    connection, Conv/Relu), a 1x1 head to two classes."""
    net = _Net(seed)
    e1 = net.op("Relu", [net.conv("x", 3, 8)])
    e2 = net.op("Relu", [net.conv(net.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]),
                                  8, 16)])
    mid = net.op("Relu", [net.conv(net.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]),
                                   16, 32)])
    scales = net.const(np.array([1, 1, 2, 2]))
    up2 = net.op("Concat", [net.op("Resize", [mid, "", scales], mode="nearest"), e2], axis=1)
    d2 = net.op("Relu", [net.conv(up2, 48, 16)])
    up1 = net.op("Concat", [net.op("Resize", [d2, "", scales], mode="nearest"), e1], axis=1)
    d1 = net.op("Relu", [net.conv(up1, 24, 8)])
    return net.model([1, 3, 32, 32], net.conv(d1, 8, 2, k=1), "unet")


MODELS: Dict[str, Callable[[], onnx.ModelProto]] = {
    "mobilenet_v2": lambda: _corpus("mobilenet_v2"),
    "mobilenet_v3_small": lambda: _corpus("mobilenet_v3_small"),
    "prelu_net": prelu_net,
    "unet": unet,
}


def _shape(model: onnx.ModelProto) -> List[int]:
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def _reference(qdq: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    return ort.InferenceSession(str(qdq), options, providers=["CPUExecutionProvider"])


def _convert(name: str, out: Path, **options):
    model = MODELS[name]()
    rng = np.random.default_rng(0)
    calibration = {model.graph.input[0].name:
                   rng.uniform(-1, 1, [16] + _shape(model)[1:]).astype(np.float32)}
    if options.get("int8", True):
        return model, mrvl_convert.convert(model, out, quantize=Quantization(calibration))
    return model, mrvl_convert.convert(model, out)


def _assert_int8_exact(tmp_path: Path, name: str, inputs: int) -> None:
    model, result = _convert(name, tmp_path / "int8")
    stages = [s["kind"] for s in result.manifest["stages"]]
    cpu = {n["name"]: n.get("reason") for n in result.report["nodes"] if n["placement"] == "cpu"}
    assert stages == ["mrvl"], cpu
    assert "int8_forms" not in result.report, result.report["int8_forms"]
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    hybrid, reference = mrvl_convert.HybridSession(result.out_dir), _reference(qdq)
    feeds = np.random.default_rng(1).uniform(-1, 1, [inputs] + _shape(model)[1:])
    input_name = model.graph.input[0].name
    off = []
    for k, sample in enumerate(feeds.astype(np.float32)):
        feed = {input_name: sample[None]}
        got, want = hybrid.run(None, feed)[0], reference.run(None, feed)[0]
        if not np.array_equal(got, want):
            off.append(k)
    assert not off, f"{len(off)} of {inputs} inputs differ from onnxruntime's QDQ run: {off[:10]}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_mobile_net_is_one_mrvl_subgraph_in_fp16_and_in_int8_exactly(tmp_path, name):
    _, fp16 = _convert(name, tmp_path / "fp16", int8=False)
    assert [s["kind"] for s in fp16.manifest["stages"]] == ["mrvl"]
    _assert_int8_exact(tmp_path, name, inputs=20)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_mobile_net_int8_equals_onnxruntime_on_200_inputs(tmp_path, name):
    _assert_int8_exact(tmp_path, name, inputs=200)
