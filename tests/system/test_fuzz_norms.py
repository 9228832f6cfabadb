"""Property tests over norms and powers as exporters write them
(tests/support/strategies/norms.py): each power or division by a Sqrt keeps onnxruntime's result
within frontend/rsqrt_forms.py's stated bound over sixty binades; an RMSNorm encoder in any of its
spellings is one Mrvl subgraph and passes verify. Quick profile by default (a tenth of its
examples for the conversions: each is a conversion and a verify)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import mrvl_convert
from mrvl_convert.verify.compare import compare
from mrvl_convert.frontend.rsqrt_forms import DIV_BOUND, POW_BOUND, POW_BOUND_ROUNDED
from support.models import canonicalized, ort_sqrt_is_fast, run_ort
from support.strategies.norms import global_max_models, powers, rmsnorm_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10))


@given(case=powers())
def test_powers_and_divisions_by_a_sqrt_stay_within_their_bound(case):
    canonical, proto = canonicalized(case.model)
    assert not {"Pow", "Div"} & {n.op for n in canonical.graph.nodes}
    [want] = run_ort(case.model, case.feeds, optimize=False).values()
    [got] = run_ort(proto, case.feeds, optimize=False).values()
    finite = np.isfinite(want) & (want != 0)
    assert np.all((got == want)[~finite] | np.isnan(want[~finite]))
    rel = np.abs(got[finite].astype(np.float64) - want[finite]) / np.abs(want[finite])
    if any(n.op_type == "Pow" for n in case.model.graph.node):
        bound = POW_BOUND if ort_sqrt_is_fast() else POW_BOUND_ROUNDED
    else:
        bound = DIV_BOUND
    assert rel.size == 0 or rel.max() <= bound


@_FEW
@given(case=rmsnorm_models())
def test_an_rmsnorm_encoder_is_one_mrvl_subgraph_and_verifies(case, tmp_path_factory):
    out = tmp_path_factory.mktemp("norms") / "art"
    result = mrvl_convert.convert(case.model, out)
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], str(case)
    assert compare(case.model, out, [case.feeds]).passed


@_FEW
@given(case=rmsnorm_models(scale=400.0))
def test_an_overflowing_rmsnorm_is_named_as_the_models_own(case, tmp_path_factory):
    """Squares of a residual stream of ~1200 reach ~1e6 in float32: verify names the first
    overflowing tensor, a square or its mean (verify/fp16_overflow.py)."""
    out = tmp_path_factory.mktemp("norms_over") / "art"
    mrvl_convert.convert(case.model, out)
    check = compare(case.model, out, [case.feeds])
    assert check.overflow.startswith("fp16 overflows in the model itself: norm0_"), str(case)
    assert "converter defect, not fp16" not in check.summary_line()


@given(case=global_max_models())
def test_a_global_reduce_max_is_a_global_max_pool_bit_for_bit(case):
    canonical, proto = canonicalized(case.model)
    assert next(n for n in canonical.graph.nodes if n.name == "pool").op == "GlobalMaxPool"
    [want] = run_ort(case.model, case.feeds, optimize=False).values()
    [got] = run_ort(proto, case.feeds, optimize=False).values()
    assert got.shape == want.shape and np.array_equal(got, want)
