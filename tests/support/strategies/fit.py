"""Batchless ``[frames, bins]`` models (madmom's music nets, issue 45's key_cnn): per-frame ops
(a scale, a Relu, an offset) on the batchless input, its lift to ``[1, frames, bins]`` by an
``Unsqueeze(0)`` or a ``Reshape``, a channel axis, then one or two Convs. Every such model is
one sample; its Mrvl subgraph must read the lifted tensor at batch 1 (``batch_axis.py``).

``fit_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a falsifying
example prints as that call); ``frames_models()`` draws one.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel

PER_FRAME = ("scale", "relu", "offset")


class FramesModel(GeneratedModel):
    rebuilt_by = "fit_from_spec"


def _per_frame(b: Builder, y: str, op: str, bins: int, k: int) -> str:
    if op == "relu":
        return b.op("Relu", [y], name=f"relu{k}")
    values = np.linspace(0.5, 1.5, bins, dtype=np.float32)
    return b.op("Mul" if op == "scale" else "Add", [y, b.const(values)], name=f"{op}{k}")


def fit_from_spec(spec: dict) -> FramesModel:
    frames, bins = spec["frames"], spec["bins"]
    b = Builder(seed=spec["seed"], opset=13)
    y = b.input("x", [frames, bins])
    for k, op in enumerate(spec["ops"]):
        y = _per_frame(b, y, op, bins, k)
    if spec["lift"] == "unsqueeze":
        y = b.op("Unsqueeze", [y, b.const(np.array([0], np.int64))], name="lift")
    else:
        y = b.op("Reshape", [y, b.const(np.array([1, frames, bins], np.int64))], name="lift")
    y = b.op("Unsqueeze", [y, b.const(np.array([1], np.int64))], name="channel")
    for k in range(spec["convs"]):
        y = b.op("Relu", [b.conv(y, 1 if k == 0 else 4, 4, pads=[1, 1, 1, 1])], name=f"act{k}")
    rng = np.random.default_rng(spec["seed"])
    feeds = {"x": rng.standard_normal((frames, bins)).astype(np.float32)}
    return FramesModel(b.model([y]), feeds, f"frames {frames} x {bins}", spec)


@st.composite
def frames_models(draw) -> FramesModel:
    spec = {"frames": draw(st.integers(2, 24)), "bins": draw(st.integers(3, 12)),
            "ops": draw(st.lists(st.sampled_from(PER_FRAME), max_size=2)),
            "lift": draw(st.sampled_from(("unsqueeze", "reshape"))),
            "convs": draw(st.integers(1, 2)), "seed": draw(st.integers(0, 2**16))}
    return fit_from_spec(spec)
