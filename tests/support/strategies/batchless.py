"""Batchless music nets as madmom writes them (issue 45, findings 2 and 6): a ``[frames, bins]``
input, Unsqueeze to ``[T, F, 1]``, Convs wrapped ``Unsqueeze(0) -> Transpose -> Conv ->
Transpose -> Squeeze(0)``, and between them on the batchless ``[T, F, C]`` a draw of per-channel
Mul / Add, Elu / Tanh / Relu, a Slice of the bins and a residual Add, and a Pad of the time axis
before the second Conv.

``batchless_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a
falsifying example prints as that call); ``batchless_models()`` draws one.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel

# A Pad has no layer of its own: it maps folded into the Conv it feeds, so it is drawn only
# right before the second Conv (where madmom writes it).
BETWEEN = ("scale", "shift", "elu", "tanh", "relu", "slice_bins", "residual")


class BatchlessModel(GeneratedModel):
    rebuilt_by = "batchless_from_spec"


def _axes(b: Builder, *axes: int) -> str:
    return b.const(np.array(axes, np.int64))


def _wrapped_conv(b: Builder, x: str, cin: int, cout: int, tag: str) -> str:
    y = b.op("Transpose", [b.op("Unsqueeze", [x, _axes(b, 0)], name=f"{tag}_add_batch")],
             name=f"{tag}_to_nchw", perm=[0, 3, 1, 2])
    y = b.op("Conv", [y, b.weight(cout, cin, 3, 3)], name=tag, kernel_shape=[3, 3],
             pads=[1, 1, 1, 1])
    y = b.op("Transpose", [y], name=f"{tag}_to_nhwc", perm=[0, 2, 3, 1])
    return b.op("Squeeze", [y, _axes(b, 0)], name=f"{tag}_remove_batch")


def _between(b: Builder, y: str, op: str, channels: int, k: int) -> str:
    name = f"{op}{k}"
    if op in ("scale", "shift"):
        values = np.linspace(0.6, 1.4, channels, dtype=np.float32)
        return b.op("Mul" if op == "scale" else "Add", [y, b.const(values)], name=name)
    if op in ("elu", "tanh", "relu"):
        return b.op(op.capitalize(), [y], name=name)
    if op == "pad_time":  # a frame each side
        return b.op("Pad", [y, b.const(np.array([1, 0, 0, 1, 0, 0], np.int64))], name=name)
    if op == "slice_bins":
        return b.op("Slice", [y, _axes(b, 1), _axes(b, 1 << 30), _axes(b, 1)], name=name)
    return b.op("Add", [y, b.op("Elu", [y], name=f"{name}_branch")], name=name)


def batchless_from_spec(spec: dict) -> BatchlessModel:
    b = Builder(seed=spec["seed"], opset=13)
    channels = spec["channels"]
    y = b.op("Unsqueeze", [b.input("x", [spec["frames"], spec["bins"]]), _axes(b, 2)],
             name="expand_channel")
    y = _wrapped_conv(b, y, 1, channels, "conv1")
    for k, op in enumerate(spec["between"]):
        y = _between(b, y, op, channels, k)
    if spec["pad_time"]:
        y = _between(b, y, "pad_time", channels, len(spec["between"]))
    y = _wrapped_conv(b, y, channels, channels, "conv2")
    feeds = {"x": np.random.default_rng(spec["seed"]).standard_normal(
        (spec["frames"], spec["bins"])).astype(np.float32)}
    return BatchlessModel(model=b.model([y]), feeds=feeds, description=str(spec), spec=spec)


@st.composite
def batchless_models(draw) -> BatchlessModel:
    spec = {"seed": draw(st.integers(0, 2**16)), "frames": draw(st.integers(9, 40)),
            "bins": draw(st.integers(4, 12)), "channels": draw(st.sampled_from([2, 4, 8])),
            "between": draw(st.lists(st.sampled_from(BETWEEN), min_size=1, max_size=5)),
            "pad_time": draw(st.booleans())}
    return batchless_from_spec(spec)
