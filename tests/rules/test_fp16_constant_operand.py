"""A Mul by a constant beyond fp16's range (silero_vad's magnitude * 2**20) stays on the CPU:
the layer holds its constant in fp16, where it would be inf (before: the artifact was written
and the simulator refused it, "constant ... has values outside the float16 range")."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime.session import HybridSession
from support.models import Builder, run_ort


@pytest.mark.parametrize("scale,placement", [(2.0 ** 20, "cpu"), (2.0 ** 10, "mrvl")])
def test_a_constant_operand_beyond_fp16_keeps_its_mul_on_the_cpu(tmp_path, scale, placement):
    b = Builder(opset=13)
    y = b.op("Relu", [b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])])
    y = b.op("Mul", [y, b.const(np.array(scale, np.float32))], name="scaled")
    model = b.model([b.op("Mul", [y, b.const(np.array(2.0 ** -12, np.float32))], name="back")])
    result = mrvl_convert.convert(model, tmp_path / "art")
    entry = result.placement("scaled")
    assert entry["placement"] == placement, entry
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    [got] = HybridSession(tmp_path / "art").run(None, x)
    [want] = run_ort(model, x).values()
    assert np.all(np.isfinite(got))
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()  # fp16's error, of the peak
