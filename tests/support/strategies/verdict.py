"""Strategies for verify's verdict forms: classifier logits with near ties beside a perturbed
copy, and models whose shape inputs are computed at run time (Reshape targets Concat-ed from
Shape, Gather indices from a size, Expand to a Shape), which the fp16 floor must leave whole."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder


@st.composite
def logits_pairs(draw) -> Tuple[np.ndarray, np.ndarray, float]:
    """(want, got, bound): fp32's logits [N, K], a copy moved by up to ``bound`` per element
    or by more, and the bound."""
    rows = draw(st.integers(1, 6))
    classes = draw(st.integers(2, 6))
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    want = rng.standard_normal((rows, classes)).astype(np.float32)
    if draw(st.booleans()):  # a near tie between the two best classes
        want[:, 1] = want.max(axis=1) + draw(st.floats(0, 1e-3))
        want[:, 0] = want[:, 1] - draw(st.floats(0, 1e-3))
    bound = draw(st.floats(1e-4, 0.5))
    scale = draw(st.sampled_from([0.5, 1.0, 4.0]))
    got = (want + scale * bound * rng.uniform(-1, 1, want.shape)).astype(np.float32)
    return want, got, bound


@st.composite
def sized_models(draw) -> Tuple[onnx.ModelProto, Tuple[int, ...]]:
    """x [1, C, H, W] -> Relu -> Reshape to [Shape(x)[0], -1] -> Gather at a size-derived
    index -> Mul -> Expand to the flat tensor's Shape: every shape input computed at run time."""
    c, h, w = (draw(st.integers(1, 4)) for _ in range(3))
    b = Builder(draw(st.integers(0, 100)), opset=17)
    x = b.input("x", [1, c, h, w])
    y = b.op("Relu", [x])
    n = b.op("Shape", [y], start=0, end=1)
    flat = b.op("Reshape", [y, b.op("Concat", [n, b.const(np.array([-1], np.int64))],
                                    axis=0)])
    size = b.op("Cast", [b.op("Shape", [flat], start=1, end=2)], to=1)
    index = b.op("Cast", [b.op("Floor", [b.op("Div", [size, b.const(
        np.array([2.0], np.float32))])])], to=7)
    picked = b.op("Gather", [flat, b.op("Squeeze", [index])], axis=1)
    factor = draw(st.sampled_from([0.1, 0.3, 1.0, 3.7, 10.0]))
    y = b.op("Expand", [b.op("Mul", [picked, b.const(np.array(factor, np.float32))]),
                        b.op("Shape", [flat])])
    return b.model([y], name="sized"), (1, c, h, w)
