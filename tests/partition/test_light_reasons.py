"""A light region sent to the CPU names the CPU ops it reads and feeds (partition/
light_regions.py ``cpu_around``): silero_vad's Slices and flip MatMuls between its Log and a
last-axis Concat said only "no compute-heavy layer", not what cut the model there."""
from __future__ import annotations

import mrvl_convert
from support.models import Builder


def test_a_light_region_between_cpu_ops_names_them(tmp_path):
    b = Builder()
    y = b.op("Relu", [b.gemm(b.input("x", [1, 16]), 16, 16)], name="fc1")
    y = b.op("Sin", [y], name="cut1")
    y = b.op("Relu", [b.op("Mul", [y, y], name="square")], name="light")
    y = b.op("Cos", [y], name="cut2")
    model = b.model([b.op("Relu", [b.gemm(y, 16, 8)], name="fc2")])
    result = mrvl_convert.convert(model, tmp_path / "art")
    reason = result.placement("square")["reason"]
    assert "no compute-heavy layer" in reason
    assert reason.endswith("; it reads 'cut1' and feeds 'cut2' on CPU"), reason


def test_a_light_tail_names_only_what_it_reads(tmp_path):
    b = Builder()
    y = b.op("Relu", [b.gemm(b.input("x", [1, 16]), 16, 16)], name="fc1")
    y = b.op("Relu", [b.op("Sin", [y], name="cut")], name="tail")
    result = mrvl_convert.convert(b.model([y]), tmp_path / "art")
    assert result.placement("tail")["reason"].endswith("; it reads 'cut' on CPU")
