"""Property tests over CNNs exported at a batch above the device's 8
(tests/support/strategies/batch.py): a per-sample one is one Mrvl subgraph compiled at the
largest divisor of its batch its layers take (1 where a Mul2D is) and run in chunks, bit-equal
to the simulator run of the whole batch; one ending in an op that mixes the samples keeps that
op on the CPU with the batch reason naming it. Quick profile by default."""
from __future__ import annotations

import importlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings

import mrvl_convert
from mrvl_convert.estimate import load_profile
from mrvl_convert.rules.batch_axis import device_batch
from mrvl_convert.runtime.session import HybridSession
from support.strategies.batch import batch_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)
_CONVERT = importlib.import_module("mrvl_convert.convert")


@_FEW
@given(case=batch_models())
def test_a_per_sample_batch_runs_in_chunks_as_the_whole_batch(case, tmp_path_factory):
    out = tmp_path_factory.mktemp("batch")
    result = mrvl_convert.convert(case.model, out / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], result.placements
    # the layers' limit (a Mul2D takes 1), bounded by the profile's max_batch (1: TVM-built)
    limit = min(1 if "silu" in case.spec["ops"] else 8, load_profile().device.max_batch)
    runs = case.spec["batch"] // device_batch(case.spec["batch"], limit)
    assert result.manifest["stages"][0].get("runs", 1) == runs
    [chunked] = HybridSession(result.out_dir).run(None, case.feeds)
    with mock.patch.object(_CONVERT, "batch_runs", lambda *args: None):
        whole = mrvl_convert.convert(case.model, out / "whole")
    [want] = HybridSession(whole.out_dir).run(None, case.feeds)
    assert np.array_equal(chunked, want)


@_FEW
@given(case=batch_models(mixing=True))
def test_an_op_mixing_the_samples_keeps_the_reason_naming_it(case, tmp_path_factory):
    result = mrvl_convert.convert(case.model, tmp_path_factory.mktemp("mix") / "art")
    entry = result.placement("mix")
    assert entry["placement"] == "cpu"
    assert f"batch {case.spec['batch']} is larger than the accelerator's maximum of 8" in \
        entry["reason"] and "'mix'" in entry["reason"], entry["reason"]
