"""QDQ models as other quantizers write them: onnxruntime's ``quantize_static`` with its own
defaults (per-channel int8 weights, uint8 activations with zero points) or per-tensor uint8,
of small models built here (a ResNet-like CNN)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx

from support.models import Builder


def resnet_like(seed: int = 0, channels: int = 16, blocks: int = 2) -> onnx.ModelProto:
    """Conv-Relu stem, ``blocks`` residual blocks (Conv-Relu-Conv, Add, Relu), global average
    pool, Flatten, Gemm: a ResNet's forms at 1x3x32x32."""
    b = Builder(seed)
    x = b.input("x", [1, 3, 32, 32])
    y = b.op("Relu", [b.conv(x, 3, channels, pads=[1, 1, 1, 1])])
    for _ in range(blocks):
        z = b.op("Relu", [b.conv(y, channels, channels, pads=[1, 1, 1, 1])])
        z = b.conv(z, channels, channels, pads=[1, 1, 1, 1])
        y = b.op("Relu", [b.op("Add", [z, y])])
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])])
    return b.model([b.gemm(y, channels, 10, transB=1)])


def samples(model: onnx.ModelProto, count: int = 4, seed: int = 0) -> List[Dict[str, np.ndarray]]:
    """Seeded standard-normal feeds for the model's float inputs."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        feed = {}
        for info in model.graph.input:
            shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
            feed[info.name] = rng.standard_normal(shape).astype(np.float32)
        feeds.append(feed)
    return feeds


def foreign_quantized(model: onnx.ModelProto, *, per_channel: bool = True,
                      activation: str = "QUInt8", weight: str = "QInt8",
                      feeds: List[Dict[str, np.ndarray]] = None) -> onnx.ModelProto:
    """``model`` through ``quantize_static`` (QDQ) with these options and no others: its
    defaults are ``per_channel=False, activation=QInt8``; onnxruntime's documented CNN recipe
    (and the issue's ResNet-50) is per-channel with uint8 activations."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds if feeds is not None else samples(model))

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory(prefix="fqdq_") as folder:
        src, out = Path(folder) / "f.onnx", Path(folder) / "q.onnx"
        onnx.save(model, src)
        quantize_static(str(src), str(out), _Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=getattr(QuantType, activation),
                        weight_type=getattr(QuantType, weight))
        return onnx.load(str(out))


def conv_bn_net(seed: int = 0, channels: int = 8) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu twice, then Conv -> BatchNormalization (no Relu) and
    a global pool: BatchNormalizations quantize_static leaves between QDQ pairs (the ONNX zoo's
    ShuffleNet has 49)."""
    b = Builder(seed)
    x = b.input("x", [1, 3, 16, 16])
    y = b.op("Relu", [b.bn(b.conv(x, 3, channels, pads=[1, 1, 1, 1]), channels)])
    y = b.op("Relu", [b.bn(b.conv(y, channels, channels, pads=[1, 1, 1, 1], bias=False),
                           channels)])
    y = b.bn(b.conv(y, channels, channels, pads=[1, 1, 1, 1]), channels)
    return b.model([b.op("GlobalAveragePool", [y])])
