"""A Div of two activations, generated (``layers/_div_pairs.py``): for any rank 2 to 4, a
divisor broadcasting along any of the non-batch axes and quotients across fp16's normal range,
the one Mrvl stage computes Power(d, -1) then Mul2D within the module's bound of onnxruntime's
quotient (2**-10 + 2**-20 relative)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from support.layer_chains import layer_kinds
from support.models import run_ort
from support.strategies.div_pairs import div_cases

pytestmark = pytest.mark.system

RTOL = 2.0 ** -10 + 2.0 ** -20


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(div_cases())
def test_div_of_two_activations_is_within_the_bound_on_mrvl(tmp_path_factory, case):
    model, feed = case
    out = tmp_path_factory.mktemp("div")
    result = mrvl_convert.convert(model, out / "o")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert "Power" in layer_kinds(result)
    [got] = HybridSession(result.out_dir, threads=1).run(None, feed)
    want = run_ort(model, feed)["y"]
    assert got.shape == want.shape
    np.testing.assert_array_less(np.abs(got - want), RTOL * np.abs(want) + 2.0 ** -25)
