"""The int8 corpus: real mobile networks with seeded weights, one Mrvl subgraph in fp16 and in int8.

MobileNetV2 and MobileNetV3-small (the partition corpus's), a face-landmark-like PRelu net
(Conv -> PRelu blocks, per-channel slopes) and a small U-Net (Conv/Relu down, MaxPool, nearest
Resize up, Concat skip connections; ``unet_transposed``: the same with ConvTranspose up, not in
``MODELS``). Used by ``tests/layers/qnn/test_int8_mobile.py`` and
``benchmarks/int8_photographs.py``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Callable, List, Mapping, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from support import corpus, corpus_mobile


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


def _unet_encoder(net: "_Net") -> Tuple[str, str, str]:
    """The U-Nets' two levels down (Conv/Relu, MaxPool): the two skip tensors and the middle."""
    e1 = net.op("Relu", [net.conv("x", 3, 8)])
    e2 = net.op("Relu", [net.conv(net.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]),
                                  8, 16)])
    mid = net.op("Relu", [net.conv(net.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]),
                                   16, 32)])
    return e1, e2, mid


def unet(seed: int = 0) -> onnx.ModelProto:
    """Two levels down (Conv/Relu, MaxPool), two up (nearest Resize x2, Concat with the skip
    connection, Conv/Relu), a 1x1 head to two classes."""
    net = _Net(seed)
    e1, e2, mid = _unet_encoder(net)
    scales = net.const(np.array([1, 1, 2, 2]))
    up2 = net.op("Concat", [net.op("Resize", [mid, "", scales], mode="nearest"), e2], axis=1)
    d2 = net.op("Relu", [net.conv(up2, 48, 16)])
    up1 = net.op("Concat", [net.op("Resize", [d2, "", scales], mode="nearest"), e1], axis=1)
    d1 = net.op("Relu", [net.conv(up1, 24, 8)])
    return net.model([1, 3, 32, 32], net.conv(d1, 8, 2, k=1), "unet")


def unet_transposed(seed: int = 0) -> onnx.ModelProto:
    """``unet`` with learned upsampling: each nearest Resize x2 is a ConvTranspose (2x2 kernel,
    stride 2, bias) followed by a Relu, as U-Nets are usually written."""
    net = _Net(seed)
    e1, e2, mid = _unet_encoder(net)
    up2 = net.op("Concat", [_up(net, mid, 32, 16), e2], axis=1)
    d2 = net.op("Relu", [net.conv(up2, 32, 16)])
    up1 = net.op("Concat", [_up(net, d2, 16, 8), e1], axis=1)
    d1 = net.op("Relu", [net.conv(up1, 16, 8)])
    return net.model([1, 3, 32, 32], net.conv(d1, 8, 2, k=1), "unet_transposed")


def _up(net: _Net, x: str, cin: int, cout: int) -> str:
    w = net.rng.standard_normal((cin, cout, 2, 2)) * (2.0 / (cin * 4)) ** 0.5
    b = net.rng.standard_normal(cout) * 0.1
    return net.op("Relu", [net.op("ConvTranspose", [x, net.const(w), net.const(b)],
                                  kernel_shape=[2, 2], strides=[2, 2])])


MODELS: Mapping[str, Callable[[], onnx.ModelProto]] = MappingProxyType({
    "mobilenet_v2": lambda: corpus.built("mobilenet_v2"),
    "mobilenet_v3_small": corpus_mobile.mobilenet_v3_small,
    "prelu_net": prelu_net,
    "unet": unet,
})


def int8_corpus(name: str) -> onnx.ModelProto:
    """One model of the int8 corpus, by name (``MODELS``)."""
    return MODELS[name]()
