"""Hypothesis strategies: a Pad of any mode between two convolutions (frontend/pad_forms.py and
pad_sinking.py): rank 2 to 4, constant (0, another value, -inf), reflect or edge, pads from -2 to
3 per non-batch axis (crops among them), an ``axes`` input or none, batch 1 or 2, and the same
layer after the Pad (a Conv folds a zero pad), a MaxPool (it folds a -inf pad) or none. Only Pads onnxruntime runs are drawn."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder

MODES = ("constant", "reflect", "edge")


@dataclass(frozen=True)
class PadCase:
    shape: Tuple[int, ...]
    begin: Tuple[int, ...]     # per axis, batch axis 0 included (always 0)
    end: Tuple[int, ...]
    mode: str
    value: Optional[float]     # constant mode: the value input (None: absent, 0)
    with_axes: bool            # pads given for the non-batch axes through an axes input
    conv_after: bool
    seed: int
    pool_after: bool = False   # a 3x3 MaxPool (at most) reads the Pad, nothing else (4-D)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def padded_channels(self) -> int:
        return self.shape[1] + self.begin[1] + self.end[1]

    def model(self) -> onnx.ModelProto:
        """Conv (1x1; 1-D of a 3-D tensor; Gemm of a 2-D one) -> Pad -> [the same, or a
        MaxPool]."""
        b = Builder(seed=self.seed, opset=18)
        x = b.input("x", list(self.shape))
        a = self._layer(b, x, self.shape[1], self.shape[1])
        if self.with_axes:
            axes = list(range(1, self.rank))
            pads = [self.begin[a] for a in axes] + [self.end[a] for a in axes]
        else:
            pads = list(self.begin) + list(self.end)
        inputs = [a, b.const(np.array(pads, np.int64))]
        if self.value is not None or self.with_axes:
            inputs.append(b.const(np.array(self.value or 0.0, np.float32)))
        if self.with_axes:
            inputs.append(b.const(np.array(axes, np.int64)))
        y = b.op("Pad", inputs, name="pad", mode=self.mode)
        if self.pool_after:
            padded = [n + b0 + e0 for n, b0, e0 in zip(self.shape, self.begin, self.end)]
            return b.model([b.op("MaxPool", [y], kernel_shape=[min(3, padded[2]),
                                                                min(3, padded[3])])])
        if not self.conv_after:
            return b.model([y])
        return b.model([self._layer(b, y, self.padded_channels(), 2)])

    def _layer(self, b: Builder, x: str, cin: int, cout: int) -> str:
        if self.rank == 4:
            return b.conv(x, cin, cout, k=1)
        if self.rank == 3:
            return b.op("Conv", [x, b.weight(cout, cin, 1)], kernel_shape=[1])
        return b.op("Gemm", [x, b.weight(cin, cout)])

    def feed(self) -> dict:
        rng = np.random.default_rng(self.seed)
        return {"x": rng.standard_normal(self.shape).astype(np.float32)}


def _axis(draw, size: int, mode: str) -> Tuple[int, int]:
    """(begin, end) onnxruntime takes on an axis of ``size``: crops leave >= 1 (reflect: >= 2
    when it pads), a reflect pad at most the cropped length less one."""
    begin, end = draw(st.integers(-2, 3)), draw(st.integers(-2, 3))
    crop = max(0, -begin) + max(0, -end)
    if size - crop < (2 if mode == "reflect" else 1):
        begin, end = max(0, begin), max(0, end)
    if mode == "reflect":
        most = size - max(0, -begin) - max(0, -end) - 1
        begin, end = min(begin, most), min(end, most)
    return begin, end


@st.composite
def pad_cases(draw, between_layers: bool = False) -> PadCase:
    """``between_layers``: always a layer after the Pad, a finite value (what a conversion
    runs within fp16's tolerance)."""
    rank = draw(st.sampled_from([2, 3, 4, 4]))
    shape = (draw(st.integers(1, 2)),) + tuple(draw(st.integers(1, 6)) for _ in range(rank - 1))
    mode = draw(st.sampled_from(MODES))
    pairs = [(0, 0)] + [_axis(draw, n, mode) for n in shape[1:]]
    if not any(b or e for b, e in pairs):  # pad something: a reflect of 1 sample cannot
        pairs[-1] = (1, 0)
        mode = "edge" if mode == "reflect" and shape[-1] < 2 else mode
    values = [None, 0.0, 1.5, -2.0] + ([] if between_layers else [float("-inf")])
    value = draw(st.sampled_from(values)) if mode == "constant" else None
    pool = rank == 4 and not between_layers and draw(st.booleans())
    if pool and draw(st.booleans()):  # what a MaxPool folds: -inf on H and W, below 3
        mode, value = "constant", float("-inf")
        pairs = [(0, 0), (0, 0)] + [(draw(st.integers(0, 2)), draw(st.integers(low, 2)))
                                    for low in (0, 1)]
    return PadCase(shape=shape, begin=tuple(b for b, _ in pairs), end=tuple(e for _, e in pairs),
                   mode=mode, value=value, with_axes=draw(st.booleans()),
                   conv_after=not pool and (between_layers or draw(st.booleans())),
                   seed=draw(st.integers(0, 99)), pool_after=pool)
