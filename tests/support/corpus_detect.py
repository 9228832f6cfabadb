"""A YOLOv8n-shaped detector for the partition corpus, written as the Ultralytics exporter
writes one (seeded random weights, batch 1, 1x3x64x64).

- SiLU as Conv -> Sigmoid -> Mul (the exporter's spelling; BatchNormalization already folded);
- a C2f block: 1x1 Conv, Split in two halves, a residual bottleneck on the second, Concat of
  the halves and the bottleneck, 1x1 Conv;
- a neck: the deepest map upsampled by Resize (nearest, x2, asymmetric/floor as exported),
  concatenated with the shallower one;
- a head per scale: the box branch's distribution focal loss decoding (Reshape to
  [1, 4, reg_max, HW], Transpose, Softmax over the bins, a 1x1 Conv with weights 0..reg_max-1,
  Reshape), the class branch's Sigmoid, both concatenated and the scales joined along the
  anchors: the output is [1, 4 + classes, anchors].
"""
from __future__ import annotations

import numpy as np
import onnx

from support.models import Builder

REG_MAX = 4
CLASSES = 3
DETECT_SHAPES = {"images": [1, 3, 64, 64]}


def silu_conv(b: Builder, x: str, cin: int, cout: int, k: int = 3, stride: int = 1) -> str:
    y = b.conv(x, cin, cout, k=k, strides=[stride, stride], pads=[k // 2] * 4)
    return b.op("Mul", [y, b.op("Sigmoid", [y])])


def _c2f(b: Builder, x: str, channels: int) -> str:
    """C2f with one bottleneck (shortcut), as YOLOv8n's first stages."""
    half = channels // 2
    y = silu_conv(b, x, channels, channels, k=1)
    first = b.op("Split", [y, b.const(np.array([half, half], np.int64))], name="c2f_split",
                 outputs=2, axis=1)
    second = "c2f_split_out1"
    m = silu_conv(b, silu_conv(b, second, half, half), half, half)
    m = b.op("Add", [second, m])
    y = b.op("Concat", [first, second, m], name="c2f_concat", axis=1)
    return silu_conv(b, y, 3 * half, channels, k=1)


def _head(b: Builder, x: str, channels: int, size: int, scale: int) -> str:
    """One scale's box (DFL-decoded) and class outputs: [1, 4 + CLASSES, size * size]."""
    anchors = size * size
    box = b.conv(silu_conv(b, x, channels, channels), channels, 4 * REG_MAX, k=1)
    box = b.op("Reshape", [box, b.const(np.array([1, 4, REG_MAX, anchors], np.int64))])
    box = b.op("Transpose", [box], name=f"dfl_transpose_{scale}", perm=[0, 2, 1, 3])
    box = b.op("Softmax", [box], axis=1)
    bins = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    box = b.op("Conv", [box, b.const(bins)], name=f"dfl_conv_{scale}", kernel_shape=[1, 1])
    box = b.op("Reshape", [box, b.const(np.array([1, 4, anchors], np.int64))])
    cls = b.conv(silu_conv(b, x, channels, channels), channels, CLASSES, k=1)
    cls = b.op("Reshape", [b.op("Sigmoid", [cls]),
                           b.const(np.array([1, CLASSES, anchors], np.int64))])
    return b.op("Concat", [box, cls], axis=1)


def yolo_detect(seed: int = 0) -> onnx.ModelProto:
    """Stem and stages (stride 2 Conv+SiLU), a C2f, a deeper stage, Resize + Concat neck,
    two-scale DFL head; the output is [1, 4 + CLASSES, 16 * 16 + 8 * 8]."""
    b = Builder(seed, opset=13)
    x = b.input("images", DETECT_SHAPES["images"])
    y = silu_conv(b, x, 3, 8, stride=2)                  # 32x32
    y = silu_conv(b, y, 8, 16, stride=2)                 # 16x16
    p3 = _c2f(b, y, 16)
    p4 = silu_conv(b, p3, 16, 32, stride=2)              # 8x8
    up = b.op("Resize", [p4, "", b.const(np.array([1, 1, 2, 2], np.float32))],
              name="neck_resize", mode="nearest", coordinate_transformation_mode="asymmetric",
              nearest_mode="floor")
    n3 = b.op("Concat", [up, p3], name="neck_concat", axis=1)
    n3 = silu_conv(b, n3, 48, 16, k=1)
    out = b.op("Concat", [_head(b, n3, 16, 16, 3), _head(b, p4, 32, 8, 4)], axis=2)
    return b.model([out], name="yolo_detect")
