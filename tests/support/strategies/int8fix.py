"""Strategies for the int8 forms of issue 45 finding 7: a BatchNormalization no Conv precedes
(after a MaxPool or a Relu), its parameters drawn far from and near 0."""
from __future__ import annotations

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper

from support.int8 import float_model


@st.composite
def lone_batchnorm_models(draw) -> onnx.ModelProto:
    """Conv -> Relu -> (MaxPool) -> BatchNormalization -> Conv, the BN named, of 2 to 6
    channels, its mean and shift up to 64 in magnitude, its scale 1/8 to 4."""
    channels = draw(st.integers(2, 6))
    pooled = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    far = draw(st.sampled_from([1.0, 8.0, 64.0]))
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="c1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="r1")]
    last, size = "r1", 8
    if pooled:
        nodes.append(helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2],
                                      strides=[2, 2], name="p1"))
        last, size = "p1", 4
    nodes += [helper.make_node("BatchNormalization", [last, "g", "be", "m", "v"], ["bn"],
                               name="bn", epsilon=float(draw(st.sampled_from([1e-5, 1e-3])))),
              helper.make_node("Conv", ["bn", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], name="c2")]
    inits = {"w1": rng.standard_normal((channels, 3, 3, 3)),
             "b1": rng.standard_normal(channels),
             "g": rng.uniform(0.125, 4, channels) * rng.choice([-1, 1], channels),
             "be": rng.uniform(-far, far, channels), "m": rng.uniform(-far, far, channels),
             "v": rng.uniform(0.25, 4, channels),
             "w2": rng.standard_normal((channels, channels, 3, 3)),
             "b2": rng.standard_normal(channels)}
    return float_model(nodes, inits, [1, 3, 8, 8], [1, channels, size, size])
