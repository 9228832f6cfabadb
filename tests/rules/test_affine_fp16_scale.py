"""A Mul by a per-channel constant becomes a depthwise Conv2D whose weight is that constant, held
in fp16 on the device: a scale beyond 65504 (silero_vad's ``log(x * 2**20 + 1)``) would be inf
there. It stays on CPU with that reason, in both layer sets, instead of going to the
accelerator as an infinite weight (per channel) or naming a rule that did not take it either
(one value: "a Mul by one value is a Mul2D (mrvl.mul)")."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from support.models import Builder


def scaled(value: float, per_channel: bool):
    b = Builder(seed=1, opset=13)
    y = b.op("Relu", [b.conv(b.input("x", [1, 4, 4, 4]), 4, 4, k=1)])
    scale = np.full([1, 4, 1, 1] if per_channel else [], value, np.float32)
    if per_channel:
        scale[0, 0] = 1.0
    y = b.op("Mul", [y, b.const(scale)], name="scale")
    y = b.op("Add", [y, b.const(np.float32(1.0))])
    return b.model([b.op("Relu", [b.conv(y, 4, 4, k=1)])])


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("layer_set", ["marvell", "upstream-0.19"])
def test_a_scale_beyond_fp16_stays_on_cpu_saying_so(tmp_path, per_channel, layer_set):
    result = mrvl_convert.convert(scaled(2.0 ** 20, per_channel), tmp_path / "out",
                                  layer_set=layer_set)
    entry = result.placement("scale")
    assert entry["placement"] == "cpu"
    assert "beyond fp16's largest value 65504" in entry["reason"], entry["reason"]
    assert "would take it" not in entry["reason"]


def test_a_per_channel_scale_within_fp16_is_a_depthwise_conv(tmp_path):
    result = mrvl_convert.convert(scaled(3.0, True), tmp_path / "out")
    entry = result.placement("scale")
    assert (entry["placement"], entry["rule"]) == ("mrvl", "mrvl.channel_affine")
