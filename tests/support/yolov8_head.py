"""A YOLOv8 detector's head as the ultralytics exporter writes it, with its box decoding, on a
small backbone (seeded random weights, batch 1, input ``[1, 3, H, W]`` with H and W dynamic as
exported: pin them, e.g. ``YOLOV8_SHAPES``).

Unlike ``corpus_detect.yolo_detect`` (a DFL per scale), this is the exported form of
ultralytics' ``Detect`` (nudenet's 320n, YOLOv8n): per scale the box and class branches joined
on channels and viewed as ``[1, C, h*w]``; the scales joined on the anchor axis (Concat axis 2);
Split into box and class; the DFL (Reshape ``[1, 4, REG, A]``, Transpose, Softmax over the
bins, a 1x1 Conv of weights ``0..REG-1``, Reshape); ``dist2bbox`` against anchor points that
``make_anchors`` computes from the feature maps' sizes (Shape, Range, Expand, ...), centre and
size, times the per-anchor strides (computed so too); Sigmoid of the classes; Concat.
Quantized with the sizes dynamic, the anchors and strides are activations to the quantizer.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import onnx
from onnx import TensorProto

from support.corpus_detect import silu_conv
from support.models import Builder

REG = 8
CLASSES = 3
YOLOV8_SHAPES = {"images": [1, 3, 64, 64]}


def _size(b: Builder, x: str, axis: int) -> str:
    """Dim ``axis`` of ``x`` as a scalar int64 (Shape -> Gather), as torch exports x.shape[i]."""
    return b.op("Gather", [b.op("Shape", [x]), b.const(np.array(axis, np.int64))], axis=0)


def _anchors(b: Builder, feature: str, stride: float) -> Tuple[str, str]:
    """ultralytics' ``make_anchors`` for one map: its cell centres ``[h*w, 2]`` (x, y) and
    strides ``[h*w, 1]``, computed from the map's size."""
    h, w = _size(b, feature, 2), _size(b, feature, 3)
    one = b.const(np.array([1], np.int64))
    hw = [b.op("Unsqueeze", [v, b.const(np.array([0], np.int64))]) for v in (h, w)]
    grid = b.op("Concat", hw, axis=0)

    def centres(n: str, shape: List[str]) -> str:
        steps = b.op("Range", [b.const(np.array(0, np.int64)), n, b.const(np.array(1, np.int64))])
        half = b.op("Add", [b.op("Cast", [steps], to=TensorProto.FLOAT),
                            b.const(np.array(0.5, np.float32))])
        return b.op("Expand", [b.op("Reshape", [half, b.op("Concat", shape, axis=0)]), grid])

    sx = centres(w, [one, hw[1]])
    sy = centres(h, [hw[0], one])
    last = b.const(np.array([-1], np.int64))
    points = b.op("Concat", [b.op("Unsqueeze", [sx, last]), b.op("Unsqueeze", [sy, last])],
                  axis=-1)
    points = b.op("Reshape", [points, b.const(np.array([-1, 2], np.int64))])
    count = b.op("Unsqueeze", [b.op("Mul", [h, w]), b.const(np.array([0], np.int64))])
    strides = b.op("ConstantOfShape", [b.op("Concat", [count, one], axis=0)],
                   value=onnx.numpy_helper.from_array(np.array([stride], np.float32)))
    return points, strides


def _decode(b: Builder, dist: str, anchors: str, strides: str) -> str:
    """``dist2bbox(dist, anchors, xywh=True) * strides``: dist ``[1, 4, A]``."""
    def part(start: int) -> str:
        return b.op("Slice", [dist, b.const(np.array([start], np.int64)),
                              b.const(np.array([start + 2], np.int64)),
                              b.const(np.array([1], np.int64))])
    lt, rb = part(0), part(2)
    x1y1, x2y2 = b.op("Sub", [anchors, lt]), b.op("Add", [anchors, rb])
    centre = b.op("Div", [b.op("Add", [x1y1, x2y2]), b.const(np.array(2, np.float32))])
    size = b.op("Sub", [x2y2, x1y1])
    return b.op("Mul", [b.op("Concat", [centre, size], axis=1), strides], name="box_scale")


def yolov8_detect(seed: int = 0, reg: int = REG, classes: int = CLASSES,
                  scales: int = 2) -> onnx.ModelProto:
    """``scales`` scales (strides 8, 16, 32 of the input); the output is
    ``[1, 4 + classes, A]``, ``reg`` the DFL's bins."""
    b = Builder(seed, opset=17)
    x = b.input("images", [1, 3, "H", "W"])
    y = silu_conv(b, x, 3, 8, stride=2)
    y = silu_conv(b, y, 8, 16, stride=2)
    maps = [silu_conv(b, y, 16, 16, stride=2)]
    while len(maps) < scales:
        maps.append(silu_conv(b, maps[-1], 16, 16, stride=2))
    joined, points, strides = [], [], []
    for feature, stride in zip(maps, (8.0, 16.0, 32.0)):
        box = b.conv(silu_conv(b, feature, 16, 16), 16, 4 * reg, k=1)
        cls = b.conv(silu_conv(b, feature, 16, 16), 16, classes, k=1)
        both = b.op("Concat", [box, cls], axis=1)
        view = b.op("Concat", [b.const(np.array([1, 4 * reg + classes], np.int64)),
                               b.const(np.array([-1], np.int64))], axis=0)
        joined.append(b.op("Reshape", [both, view]))
        p, s = _anchors(b, feature, stride)
        points.append(p)
        strides.append(s)
    anchors = b.op("Unsqueeze", [b.op("Transpose", [b.op("Concat", points, axis=0)], perm=[1, 0]),
                                 b.const(np.array([0], np.int64))])
    per_anchor = b.op("Transpose", [b.op("Concat", strides, axis=0)], perm=[1, 0])
    y = b.op("Concat", joined, name="anchor_concat", axis=2)
    box = b.op("Split", [y, b.const(np.array([4 * reg, classes], np.int64))], name="head_split",
               outputs=2, axis=1)
    cls = "head_split_out1"
    count = _size(b, box, 2)
    dims = b.op("Concat", [b.const(np.array([1, 4, reg], np.int64)),
                           b.op("Unsqueeze", [count, b.const(np.array([0], np.int64))])], axis=0)
    box = b.op("Transpose", [b.op("Reshape", [box, dims])], perm=[0, 2, 1, 3])
    box = b.op("Softmax", [box], axis=1)
    bins = np.arange(reg, dtype=np.float32).reshape(1, reg, 1, 1)
    box = b.op("Conv", [box, b.const(bins)], name="dfl_conv", kernel_shape=[1, 1])
    flat = b.op("Concat", [b.const(np.array([1, 4], np.int64)),
                           b.op("Unsqueeze", [count, b.const(np.array([0], np.int64))])], axis=0)
    box = _decode(b, b.op("Reshape", [box, flat]), anchors, per_anchor)
    out = b.op("Concat", [box, b.op("Sigmoid", [cls])], axis=1, name="detections")
    return b.model([out], name="yolov8_detect")
