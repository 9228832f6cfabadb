"""CNNs exported at a static batch above the accelerator's 8 (issue 45: ``number.onnx`` at batch
10): a Conv, then a draw of per-sample ops (Relu, SiLU as Sigmoid and a Mul2D that takes batch
1, a per-channel scale, a residual Add, a MaxPool, a Conv), then optionally one op that reads
across the samples (a ReduceMean over axis 0, a Transpose moving axis 0, a Concat on axis 0).

``batch_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a falsifying
example prints as that call); ``batch_models()`` draws one.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel

PER_SAMPLE = ("relu", "silu", "scale", "residual", "maxpool", "conv")
MIXING = ("reduce_batch", "swap_batch", "concat_batch")


class BatchModel(GeneratedModel):
    rebuilt_by = "batch_from_spec"


def _per_sample(b: Builder, y: str, op: str, channels: int, k: int) -> str:
    name = f"{op}{k}"
    if op == "relu":
        return b.op("Relu", [y], name=name)
    if op == "silu":
        return b.op("Mul", [y, b.op("Sigmoid", [y], name=f"{name}_gate")], name=name)
    if op == "scale":
        values = np.linspace(0.5, 1.5, channels, dtype=np.float32).reshape(channels, 1, 1)
        return b.op("Mul", [y, b.const(values)], name=name)
    if op == "residual":
        return b.op("Add", [y, b.op("Relu", [y], name=f"{name}_branch")], name=name)
    if op == "maxpool":
        return b.op("MaxPool", [y], name=name, kernel_shape=[2, 2], strides=[1, 1],
                    pads=[0, 0, 1, 1])
    return b.op("Relu", [b.conv(y, channels, channels, pads=[1, 1, 1, 1])], name=name)


def _mixing(b: Builder, y: str, op: str) -> str:
    if op == "reduce_batch":
        return b.op("ReduceMean", [y], name="mix", axes=[0], keepdims=1)
    if op == "swap_batch":
        return b.op("Transpose", [y], name="mix", perm=[1, 0, 2, 3])
    return b.op("Concat", [y, y], name="mix", axis=0)


def batch_from_spec(spec: dict) -> BatchModel:
    b = Builder(seed=spec["seed"], opset=13)
    batch, channels = spec["batch"], spec["channels"]
    y = b.conv(b.input("x", [batch, 3, 6, 6]), 3, channels, pads=[1, 1, 1, 1])
    for k, op in enumerate(spec["ops"]):
        y = _per_sample(b, y, op, channels, k)
    if spec["mixing"]:
        y = _mixing(b, y, spec["mixing"])
        y = b.op("Relu", [b.conv(y, batch if spec["mixing"] == "swap_batch" else channels, 4,
                                 pads=[1, 1, 1, 1])], name="after")
    feeds = {"x": np.random.default_rng(spec["seed"]).standard_normal(
        (batch, 3, 6, 6)).astype(np.float32)}
    return BatchModel(model=b.model([y]), feeds=feeds, description=str(spec), spec=spec)


@st.composite
def batch_models(draw, mixing: bool = False) -> BatchModel:
    """A batch of 9 to 16 (primes among them); ``mixing``: end with an op of ``MIXING``."""
    spec = {"seed": draw(st.integers(0, 2**16)), "batch": draw(st.integers(9, 16)),
            "channels": draw(st.sampled_from([2, 4])),
            "ops": draw(st.lists(st.sampled_from(PER_SAMPLE), min_size=0, max_size=4)),
            "mixing": draw(st.sampled_from(MIXING)) if mixing else None}
    return batch_from_spec(spec)
