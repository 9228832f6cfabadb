"""The exact Max/Min of activations of one shape, generated (``layers/_max_pairs.py``): for any
rank 2 to 4, 2 to 4 operands and values spanning 2**-12 to 2**12, the one Mrvl stage computes
onnxruntime's Max/Min bit for bit, with a Maxpool2D and no gap (Sub/Sum2D) layer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from support.layer_chains import layer_kinds
from support.models import run_ort
from support.strategies.max_pairs import pair_cases

pytestmark = pytest.mark.system


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair_cases())
def test_max_min_of_one_shape_is_bit_exact_on_mrvl(tmp_path_factory, case):
    model, feed = case
    out = tmp_path_factory.mktemp("pair")
    result = mrvl_convert.convert(model, out / "o")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    kinds = layer_kinds(result)
    assert "Maxpool2D" in kinds and "Sub" not in kinds and "Sum2D" not in kinds, kinds
    [got] = HybridSession(result.out_dir, threads=1).run(None, feed)
    np.testing.assert_array_equal(got, run_ort(model, feed)["y"])
