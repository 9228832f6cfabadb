"""Hypothesis strategies: small CNNs with a linear Resize (mode, factor or output size, channels,
input size, sizes or scales), the forms frontend/linear_resize.py and resize_matrices.py rewrite."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder

MODES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")


@dataclass(frozen=True)
class ResizeCase:
    mode: str
    channels: int
    src: Tuple[int, int]
    dst: Tuple[int, int]
    by_scales: bool  # the factors as a `scales` input, else `sizes`
    seed: int
    batch: int = 1

    def model(self) -> onnx.ModelProto:
        """Conv -> Relu -> Resize(linear) -> Conv: a Conv each side, so a conversion has
        compute to place around the Resize; the Resize's output is a model output too."""
        b = Builder(seed=self.seed, opset=13)
        c = self.channels
        x = b.input("x", [self.batch, 3, *self.src])
        a = b.op("Relu", [b.conv(x, 3, c, pads=[1] * 4)])
        empty = b.const(np.zeros(0, np.float32))
        if self.by_scales:
            scales = [1.0, 1.0, self.dst[0] / self.src[0], self.dst[1] / self.src[1]]
            inputs = [a, empty, b.const(np.array(scales, np.float32))]
        else:
            inputs = [a, empty, empty, b.const(np.array([self.batch, c, *self.dst], np.int64))]
        r = b.op("Resize", inputs, name="up", mode="linear",
                 coordinate_transformation_mode=self.mode)
        return b.model([b.conv(r, c, 2, pads=[1] * 4), r])

    def feed(self) -> dict:
        rng = np.random.default_rng(self.seed)
        return {"x": rng.standard_normal((self.batch, 3, *self.src)).astype(np.float32)}


@st.composite
def resize_cases(draw) -> ResizeCase:
    """Batch 1 or 2; integer factors 1-4 per axis (not both 1) half the time, any output size
    up to 3x (a shrink among them) the other half; scales only where they give the output size
    exactly."""
    src = (draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    if draw(st.booleans()):
        factors = draw(st.tuples(st.integers(1, 4), st.integers(1, 4))
                       .filter(lambda f: f != (1, 1)))
        dst = (src[0] * factors[0], src[1] * factors[1])
        by_scales = draw(st.booleans())
    else:
        dst = (draw(st.integers(1, 3 * src[0])), draw(st.integers(1, 3 * src[1])))
        by_scales = False
    return ResizeCase(mode=draw(st.sampled_from(MODES)), channels=draw(st.integers(1, 6)),
                      src=src, dst=dst, by_scales=by_scales, seed=draw(st.integers(0, 99)),
                      batch=draw(st.integers(1, 2)))
