"""A value computed from sizes that the quantizer quantized is data (``verify/value_tensors.py``
(c)): verify's int8 reference rounds it where the artifact's fp16 layer holds it in fp16 (a
YOLOv8 head's anchors, a Sum2D's constant), while the sizes and indices it is computed from
stay unrounded."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from mrvl_convert.verify.value_tensors import never_rounded
from support.models import Builder


def _anchored():
    """x + anchors, the anchors ``Range(0, x.shape[2]) + 0.5`` quantized as an activation."""
    b = Builder(seed=0, opset=13)
    x = b.input("x", [1, 4, "L"])
    n = b.op("Gather", [b.op("Shape", [x]), b.const(np.array(2, np.int64))], name="length",
             axis=0)
    steps = b.op("Cast", [b.op("Range", [b.const(np.array(0, np.int64)), n,
                                         b.const(np.array(1, np.int64))])],
                 name="steps", to=TensorProto.FLOAT)
    centres = b.op("Add", [steps, b.const(np.array(0.5, np.float32))], name="centres")
    scale, zero = b.const(np.array(0.07, np.float32)), b.const(np.array(0, np.int8))
    anchors = b.op("DequantizeLinear", [b.op("QuantizeLinear", [centres, scale, zero]),
                                        scale, zero], name="anchors")
    return b.model([b.op("Add", [x, anchors], name="shifted")])


def test_a_dequantized_value_computed_from_sizes_is_data():
    protected = never_rounded(_anchored())
    assert "anchors_out" not in protected
    assert "shifted_out" not in protected


def test_the_sizes_it_is_computed_from_stay_unrounded():
    protected = never_rounded(_anchored())
    assert {"length_out", "steps_out", "centres_out"} <= protected
