"""Property tests over integer inputs as exporters write them (tests/support/strategies/
idfeeds.py): ``input_kinds`` finds the ids' vocabulary and the mask whatever the form, and no
decoy; ``random_feeds`` then draws ids over the whole vocabulary, each mask row ones over a
prefix (the first sample unpadded), the decoys 0/1 and named by ``zero_one_inputs``; the model
runs on those feeds with finite outputs (no Softmax row is masked entirely). No conversion:
fast, the default profile's examples."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.reference import random_feeds, zero_one_inputs
from mrvl_convert.frontend.vocabulary import input_kinds
from support.models import run_ort
from support.strategies.idfeeds import idfeed_models

pytestmark = pytest.mark.system

_DTYPES = {1: "float32", 6: "int32", 7: "int64", 9: "bool"}


def _specs(model):
    return [TensorSpec(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim),
                       _DTYPES[v.type.tensor_type.elem_type]) for v in model.graph.input]


@settings(deadline=None)
@given(case=idfeed_models())
def test_the_kinds_are_found_and_drawn_as_the_model_reads_them(case):
    spec = case.spec
    kinds = input_kinds(case.model)
    assert dict(kinds.vocabularies) == {"ids": spec["vocab"]}
    assert kinds.masks == ({"mask"} if spec["mask_form"] != "none" else set())
    specs = _specs(case.model)
    assert zero_one_inputs(specs, kinds) == [s.name for s in specs if s.name in spec["decoys"]]
    feeds = random_feeds(specs, spec["seed"], 6, kinds)
    ids = np.concatenate([f["ids"].ravel() for f in feeds])
    assert ids.min() >= 0 and ids.max() < spec["vocab"]
    assert len(np.unique(ids)) > 2 or len(ids) < 8  # not the two rows 0/1 drew
    for k, feed in enumerate(feeds):
        if "mask" in feed:
            rows = feed["mask"].astype(np.int64)
            assert (rows[:, 0] == 1).all() and (np.diff(rows, axis=1) <= 0).all()
            assert k or (rows == 1).all()
        for name in spec["decoys"]:
            assert set(np.unique(feed[name])) <= {0, 1}
        [y] = run_ort(case.model, feed).values()
        assert np.isfinite(y).all()
