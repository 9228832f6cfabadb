"""Hypothesis strategies: a Pad of a long axis (frontend/pad_strips.py): rank 2 to 4, one axis of
1025 to 1100 elements (so that pad_forms' selection matrix would exceed ``MAX_SELECTION``), the
others 1 to 4, pads from -2 to 5 per non-batch axis (crops among them), reflect or edge, or
constant (0, 0.5 or -2) with the channels long, between two Relus. Only Pads onnxruntime runs
are drawn."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder, canonicalized, run_ort


@dataclass(frozen=True)
class LongPad:
    shape: Tuple[int, ...]
    pads: Tuple[int, ...]   # onnx order: begins of every axis, then ends
    mode: str
    value: float = 0.0

    def model(self) -> onnx.ModelProto:
        b = Builder(seed=0, opset=13)
        x = b.op("Relu", [b.input("x", list(self.shape))])
        value = [b.const(np.array(self.value, np.float32))] if self.mode == "constant" else []
        y = b.op("Pad", [x, b.const(np.array(self.pads, np.int64))] + value, name="pad",
                 mode=self.mode)
        return b.model([b.op("Relu", [y])])


@st.composite
def long_pads(draw: st.DrawFn) -> LongPad:
    rank = draw(st.integers(2, 4))
    mode = draw(st.sampled_from(["reflect", "edge", "constant"]))
    long = 1 if mode == "constant" else draw(st.integers(1, rank - 1))
    shape = [1] + [draw(st.integers(1, 4)) for _ in range(rank - 1)]
    shape[long] = draw(st.integers(1025, 1100))
    begin, end = [0] * rank, [0] * rank
    for axis in range(1, rank):
        for side in (begin, end):
            side[axis] = draw(st.integers(-2, 5) if shape[axis] > 3 else st.integers(0, 2))
    begin[long] = max(begin[long], draw(st.integers(1, 5)))  # the long axis padded
    for axis in range(1, rank):  # what onnxruntime runs: reflect pads under the cropped axis
        kept = shape[axis] - max(0, -begin[axis]) - max(0, -end[axis])
        top = kept - 1 if mode == "reflect" else 5
        begin[axis], end[axis] = min(begin[axis], top), min(end[axis], top)
        if kept <= 0 or (mode == "reflect" and top <= 0 and (begin[axis] > 0 or end[axis] > 0)):
            begin[axis], end[axis] = 0, 0
    return LongPad(tuple(shape), tuple(begin + end), mode,
                   draw(st.sampled_from([0.0, 0.5, -2.0])) if mode == "constant" else 0.0)


def canonical_bit_equal(model: onnx.ModelProto, feed: dict):
    """The canonical graph of ``model``, after asserting that it computes on onnxruntime, bit
    for bit, what ``model`` computes on ``feed``."""
    canonical, proto = canonicalized(model)
    want, got = (next(iter(run_ort(m, feed, optimize=False).values())) for m in (model, proto))
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32),
                                                      want.view(np.uint32)), \
        float(np.abs(got - want).max())
    return canonical
