"""Random 1-D signal networks on ``[1, C, L]`` (frontend/rank_lift.py): Conv1d (kernel,
stride, dilation, padding, groups), BatchNorm1d, Relu/Sigmoid/Tanh, MaxPool1d, AvgPool1d, a
1x1 branch joined by Concat on the channels, a Slice of the time axis, a Pad before a Conv1d,
a per-channel Mul, a residual Add, and a ReduceMean or GlobalAveragePool over time at the end.

``rank_models()`` draws a spec (a flat JSON-able dict); ``rank_from_spec(spec)`` builds the
model and its feeds from it alone, so a falsifying example hypothesis prints can be pasted
into an ``@example`` as it is.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel

STEPS = ("conv", "bn", "act", "maxpool", "avgpool", "branch", "slice", "padconv", "scale",
         "residual")
TAILS = ("none", "mean", "gap")


class RankModel(GeneratedModel):
    rebuilt_by = "rank_from_spec"


@st.composite
def rank_models(draw) -> RankModel:
    spec = {"seed": draw(st.integers(0, 2 ** 16)), "opset": draw(st.sampled_from([13, 18])),
            "channels": draw(st.integers(1, 6)), "length": draw(st.integers(12, 48)),
            "steps": draw(st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 7)),
                                   min_size=1, max_size=6)),
            "tail": draw(st.sampled_from(TAILS))}
    return rank_from_spec(spec)


class _Net:
    """The network so far: its last tensor, channels and length."""

    def __init__(self, spec: dict) -> None:
        self.b = Builder(seed=spec["seed"], opset=spec["opset"])
        self.rng = np.random.default_rng(spec["seed"])
        self.x, self.c, self.length = (self.b.input("x", [1, spec["channels"], spec["length"]]),
                                       spec["channels"], spec["length"])

    def conv(self, cout: int, k: int, stride: int = 1, dilation: int = 1, pad: int = 0,
             group: int = 1, x: str = None) -> str:
        span = dilation * (k - 1) + 1
        if self.length + 2 * pad < span:
            k, dilation, span = 1, 1, 1
        b = self.b
        ins = [x or self.x, b.weight(cout, self.c // group, k),
               b.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32))]
        self.length = (self.length + 2 * pad - span) // stride + 1
        return b.op("Conv", ins, kernel_shape=[k], strides=[stride], dilations=[dilation],
                    pads=[pad, pad], group=group)

    def step(self, kind: str, v: int) -> None:
        b, x = self.b, self.x
        if kind == "conv":
            cout = 1 + v % 6
            group = self.c if v % 4 == 3 and cout % self.c == 0 else 1
            self.x = self.conv(cout, k=1 + v % 5, stride=1 + v % 2, dilation=1 + v // 6,
                               pad=v % 3, group=group)
            self.c = cout
        elif kind == "bn":
            self.x = b.bn(x, self.c)
        elif kind == "act":
            self.x = b.op(("Relu", "Sigmoid", "Tanh")[v % 3], [x])
        elif kind in ("maxpool", "avgpool") and self.length >= 3:  # a window that fits
            k, s = 2 + v % 2, 1 + v % 2
            pad = 1 if k == 3 and v % 4 < 2 else 0
            self.x = b.op("MaxPool" if kind == "maxpool" else "AveragePool", [x],
                          kernel_shape=[k], strides=[s], pads=[pad, pad])
            self.length = (self.length + 2 * pad - k) // s + 1
        elif kind == "branch":
            length, width = self.length, 1 + v % 4
            branch = b.op("Relu", [self.conv(width, 1, x=x)])
            self.length = length
            self.x, self.c = b.op("Concat", [x, branch], axis=1), self.c + width
        elif kind == "slice" and self.length >= 4:
            start, end = v % 3, self.length - v % 2
            self.x = b.op("Slice", [x, b.const(np.array([start], np.int64)),
                                    b.const(np.array([end], np.int64)),
                                    b.const(np.array([2], np.int64))])
            self.length = end - start
        elif kind == "padconv":
            pads = [0, 0, 1 + v % 2, 0, 0, v % 2]
            self.x = b.op("Pad", [x, b.const(np.array(pads, np.int64))])
            self.length += pads[2] + pads[5]
            self.x = self.conv(self.c, k=3)
        elif kind == "scale":
            gain = (0.5 + self.rng.random((self.c, 1))).astype(np.float32)
            self.x = b.op("Mul", [x, b.const(gain)])
        elif kind == "residual":
            self.x = b.op("Add", [x, b.op("Relu", [self.conv(self.c, 3, pad=1)])])

    def tail(self, kind: str) -> str:
        b = self.b
        if kind == "mean":
            if b.opset >= 18:
                return b.op("ReduceMean", [self.x, b.const(np.array([-1], np.int64))],
                            keepdims=1)
            return b.op("ReduceMean", [self.x], axes=[-1], keepdims=1)
        if kind == "gap":
            return b.op("GlobalAveragePool", [self.x])
        return self.x


def rank_from_spec(spec: dict) -> RankModel:
    net = _Net(spec)
    net.x = net.conv(1 + spec["seed"] % 6, 3, pad=1)  # a Conv1d first: a region to lift
    net.c = 1 + spec["seed"] % 6
    for kind, v in spec["steps"]:
        net.step(kind, v)
    model = net.b.model([net.tail(spec["tail"])])
    feeds = {"x": np.random.default_rng(spec["seed"] + 1).standard_normal(
        (1, spec["channels"], spec["length"])).astype(np.float32)}
    return RankModel(model, feeds, f"1-D net {[s for s, _ in spec['steps']]}", spec)

