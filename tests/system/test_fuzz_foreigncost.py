"""Property test: the requantization cost's drawn feeds (``foreign_cost.drawn_feeds``) are the
feeds verify draws by default (``verify/reference.random_feeds`` with the model's
``input_kinds``, same seed), whatever form the exporter gave the ids and the mask
(tests/support/strategies/idfeeds.py), and its line names the inputs drawn 0/1. Models with no
QuantizeLinear on an input, so no calibrated range moves a float draw. No conversion: fast."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from mrvl_convert.frontend.foreign_cost import SAMPLES, drawn_feeds, drawn_how
from mrvl_convert.frontend.vocabulary import input_kinds
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.reference import random_feeds
from support.strategies.idfeeds import idfeed_models

pytestmark = pytest.mark.system

_DTYPES = {1: "float32", 6: "int32", 7: "int64", 9: "bool"}


@settings(deadline=None)
@given(case=idfeed_models())
def test_the_cost_is_measured_on_the_feeds_verify_draws(case):
    model = case.model
    specs = [TensorSpec(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim),
                        _DTYPES[v.type.tensor_type.elem_type]) for v in model.graph.input]
    verify = random_feeds(specs, 0, SAMPLES, input_kinds(model))
    cost = drawn_feeds(model)
    assert [sorted(f) for f in cost] == [sorted(f) for f in verify]
    for mine, theirs in zip(cost, verify):
        for name, values in theirs.items():
            assert mine[name].dtype == values.dtype and np.array_equal(mine[name], values), name
    how = drawn_how(model)
    assert f"ids ids below {case.spec['vocab']}" in how
    assert ("mask a padded mask" in how) == (case.spec["mask_form"] != "none")
    decoys = [s.name for s in specs if s.name in case.spec["decoys"]]
    assert (f"{', '.join(decoys)} 0/1 (" in how) == bool(decoys) and ("0/1" in how) == bool(decoys)
