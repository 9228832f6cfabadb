"""A Clip whose lower bound is below fp16's smallest subnormal (openwakeword's log-mel front end:
``Log(Clip(power, 1e-10))``) stays on the CPU in float32 with its reason. On the accelerator
the bound would be fp16(1e-10) = 0 (exactly what "%f" writes, 0.000000, since rounding to fp16
is monotone: fp16(max(x, b)) = max(x, fp16(b))), so the layer itself would be exact in fp16; but
the guard would be gone: the Log after it would see 0 where the model sees 1e-10, and give -inf
for a silent frame. Kept on the CPU the guard holds and the output stays finite."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime.session import HybridSession
from support.models import Builder

pytestmark = pytest.mark.system


def test_a_clip_guarding_a_log_below_fp16s_range_stays_on_cpu(tmp_path):
    b = Builder(opset=13)
    x = b.input("x", [1, 1, 8, 16])
    power = b.op("Relu", [b.conv(x, 1, 4, bias=False, pads=[1, 1, 1, 1])], name="power")
    clipped = b.op("Clip", [power, b.const(np.array(1e-10, np.float32)),
                            b.const(np.array(np.inf, np.float32))], name="guard")
    model = b.model([b.op("Log", [clipped], name="log")])
    result = mrvl_convert.convert(model, tmp_path / "art")
    guard = result.placement("guard")
    assert guard["placement"] == "cpu" and "six decimals (0.000000)" in guard["reason"]
    [out] = HybridSession(tmp_path / "art").run(None, {"x": np.zeros((1, 1, 8, 16),
                                                                    np.float32)})
    assert np.all(np.isfinite(out)) and np.all(out < -20)  # log(1e-10) where Relu gave 0
