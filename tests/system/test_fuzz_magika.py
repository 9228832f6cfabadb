"""Property tests over norms in exporters' spellings (tests/support/strategies/magika.py): the
rewrite of frontend/norm_forms.py happens, keeps onnxruntime's outputs within its stated
float32 bound, and the model converts to one Mrvl subgraph that passes verify. Quick profile
by default (a tenth of its examples for the conversions)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import mrvl_convert
from support.models import canonicalized, run_ort
from support.strategies.magika import norm_bound, norm_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


@settings(deadline=None)
@given(case=norm_models())
def test_the_rewrite_keeps_onnxruntime_outputs_within_its_bound(case):
    canonical, proto = canonicalized(case.model)
    assert "norm_forms" in canonical.rewritten["norm"], canonical.rewritten
    [want] = run_ort(case.model, case.feeds).values()
    [got] = run_ort(proto, case.feeds).values()
    bound = norm_bound(case.spec, case.feeds["x"], want)
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))


@_FEW
@given(case=norm_models())
def test_a_norm_is_one_mrvl_subgraph(case, tmp_path_factory):
    out = tmp_path_factory.mktemp("norm") / "art"
    result = mrvl_convert.convert(case.model, out)
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
