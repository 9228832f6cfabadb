"""Hypothesis strategies: what would make an ``[n, n]`` constant (frontend/slice_forms.py's
reversal, frontend/resize_strips.py's interpolation): a Slice with a negative step on a long
axis (1025 to 1300 elements, rank 2 to 4, not the batch axis), its starts and ends drawn (crops
among them), and a linear Resize of a long W axis (1025 to 1400 samples) to 0.6 to 1.9 times
its length in each coordinate mode, after a Relu."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder

MODES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")


@dataclass(frozen=True)
class LongReversal:
    shape: Tuple[int, ...]
    axis: int
    start: int
    end: int
    step: int

    def model(self) -> onnx.ModelProto:
        b = Builder(seed=0, opset=13)
        x = b.op("Relu", [b.input("x", list(self.shape))])
        y = b.op("Slice", [x] + [b.const(np.array([v], np.int64)) for v in
                                 (self.start, self.end, self.axis, self.step)], name="slice")
        return b.model([y])


@st.composite
def long_reversals(draw: st.DrawFn) -> LongReversal:
    rank = draw(st.integers(2, 4))
    axis = draw(st.integers(1, rank - 1))
    shape = [1] + [draw(st.integers(1, 3)) for _ in range(rank - 1)]
    shape[axis] = n = draw(st.integers(1025, 1300))
    start = draw(st.sampled_from([2 ** 63 - 1, -1, n - 1 - draw(st.integers(0, 40))]))
    end = draw(st.sampled_from([-(2 ** 63) + 1, -n - 1, draw(st.integers(-1, 40))]))
    return LongReversal(tuple(shape), axis, start, end, -draw(st.integers(1, 1)))


@dataclass(frozen=True)
class LongResize:
    shape: Tuple[int, int, int, int]
    out: int
    coord: str

    def model(self) -> onnx.ModelProto:
        b = Builder(seed=0, opset=13)
        x = b.op("Relu", [b.input("x", list(self.shape))])
        sizes = np.array(list(self.shape[:3]) + [self.out], np.int64)
        empty = b.const(np.zeros(0, np.float32))
        y = b.op("Resize", [x, empty, b.const(np.zeros(0, np.float32)), b.const(sizes)],
                 name="resize", mode="linear", coordinate_transformation_mode=self.coord)
        return b.model([y])


@st.composite
def long_resizes(draw: st.DrawFn) -> LongResize:
    w = draw(st.integers(1025, 1400))
    shape = (1, draw(st.integers(1, 2)), draw(st.integers(1, 2)), w)
    return LongResize(shape, int(w * draw(st.floats(0.6, 1.9))), draw(st.sampled_from(MODES)))
