"""verify's fp16 range events merged per layer over the samples (verify/fp16_overflow.py
``merged_events``): a layer overflowing in each of several samples is one line saying in how
many, not one line per sample (magika's verify line was 40 kB of repeats over 8 samples)."""
from __future__ import annotations

import numpy as np

import mrvl_convert
from mrvl_convert.runtime.simulator import RangeEvent
from mrvl_convert.verify.fp16_overflow import merged_events
from support.models import Builder


def _overflowing():
    b = Builder(seed=7)
    x = b.input("x", [1, 64])
    h = b.op("MatMul", [x, b.weight(64, 32, scale=1e4)], name="big_fc")
    return b.model([b.op("MatMul", [b.op("Relu", [h]), b.weight(32, 8, scale=1e-4)],
                         name="head")])


def test_one_line_per_layer_over_the_samples(tmp_path):
    model = _overflowing()
    result = mrvl_convert.convert(model, tmp_path / "o")
    feeds = [{"x": np.random.default_rng(k).standard_normal((1, 64)).astype(np.float32)}
             for k in range(4)]
    check = mrvl_convert.compare(model, result.out_dir, feeds)
    assert not check.passed and check.range_events
    layers = [e.split(" (")[0] for e in check.range_events]
    assert len(layers) == len(set(layers))
    assert all("of 4 samples; the most shown)" in e for e in check.range_events)


def test_the_sample_with_most_values_out_of_range_is_shown():
    def event(layer, n_inf):
        return RangeEvent(layer, "FC", ("fc",), n_inf, 0)
    lines = merged_events([[event("a", 3)], [event("a", 9), event("b", 1)], []])
    assert len(lines) == 2
    assert "has 9 inf" in lines[0] and "(in 2 of 3 samples" in lines[0]
    assert "has 1 inf" in lines[1] and "(in 1 of 3 samples" in lines[1]
    assert merged_events([[event("a", 3)]]) == [event("a", 3).describe()]
