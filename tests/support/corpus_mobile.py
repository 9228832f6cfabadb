"""A MobileNetV3-small-shaped classifier for the partition corpus (``corpus.built``), seeded.

The shape of the network (Howard et al. 2019, table 2), scaled down to a 64x64 input and fewer
blocks: a hard-swish stem, inverted bottlenecks with ReLU or hard-swish, squeeze-excite gates
(GlobalAveragePool -> 1x1 Conv -> Relu -> 1x1 Conv -> HardSigmoid -> Mul with the block), a
1x1 head with hard-swish, global pooling, and an FC head. Hard-swish is written both ways
exporters write it: the ``HardSwish`` op (opset 14) and ``x * Clip(x + 3, 0, 6) / 6``.
"""
from __future__ import annotations

import numpy as np
import onnx

from support.models import Builder

OPSET = 14


def _conv_bn(b: Builder, x: str, cin: int, cout: int, k: int, stride: int = 1,
             group: int = 1) -> str:
    y = b.conv(x, cin, cout, k=k, bias=False, strides=[stride, stride], group=group,
               pads=[k // 2] * 4)
    return b.bn(y, cout)


def _hswish(b: Builder, x: str, spelling: str) -> str:
    if spelling == "op":
        return b.op("HardSwish", [x])
    gate = b.op("Clip", [b.op("Add", [x, b.const(np.array(3, np.float32))]),
                         b.const(np.array(0, np.float32)), b.const(np.array(6, np.float32))])
    return b.op("Div", [b.op("Mul", [x, gate]), b.const(np.array(6, np.float32))])


def _act(b: Builder, x: str, kind: str) -> str:
    return b.op("Relu", [x]) if kind == "relu" else _hswish(b, x, kind)


def _squeeze_excite(b: Builder, x: str, channels: int) -> str:
    squeezed = max(8, channels // 4)
    g = b.op("GlobalAveragePool", [x])
    g = b.op("Relu", [b.conv(g, channels, squeezed, k=1)])
    g = b.op("HardSigmoid", [b.conv(g, squeezed, channels, k=1)], alpha=1.0 / 6.0, beta=0.5)
    return b.op("Mul", [x, g])


def _bneck(b: Builder, x: str, cin: int, mid: int, cout: int, k: int, stride: int, se: bool,
           act: str) -> str:
    h = _act(b, _conv_bn(b, x, cin, mid, 1), act) if mid != cin else x
    h = _act(b, _conv_bn(b, h, mid, mid, k, stride=stride, group=mid), act)
    if se:
        h = _squeeze_excite(b, h, mid)
    h = _conv_bn(b, h, mid, cout, 1)
    return b.op("Add", [x, h]) if (cin, stride) == (cout, 1) else h


def mobilenet_v3_small(seed: int = 0) -> onnx.ModelProto:
    b = Builder(seed, opset=OPSET)
    x = b.input("x", [1, 3, 64, 64])
    y = _hswish(b, _conv_bn(b, x, 3, 16, 3, stride=2), "op")
    # (in, expand, out, kernel, stride, squeeze-excite, activation) as the paper's table 2
    blocks = [(16, 16, 16, 3, 2, True, "relu"), (16, 72, 24, 3, 2, False, "relu"),
              (24, 88, 24, 3, 1, False, "relu"), (24, 96, 40, 5, 2, True, "op"),
              (40, 240, 40, 5, 1, True, "clip"), (40, 120, 48, 5, 1, True, "op")]
    for cin, mid, cout, k, stride, se, act in blocks:
        y = _bneck(b, y, cin, mid, cout, k, stride, se, act)
    y = _hswish(b, _conv_bn(b, y, 48, 96, 1), "clip")
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    y = _hswish(b, b.gemm(y, 96, 128, transB=1), "op")
    y = b.gemm(y, 128, 10, transB=1)
    return b.model([y], name="mobilenet_v3_small")
