"""Property tests over attention blocks as other exporters write them
(tests/support/strategies/attn.py): Where(mask, -inf, scores) with or without the IsNaN guard,
torch.where with finfo.min, an additive Where mask, no mask; heads in the batch axis or their own;
1-12 heads. For each: the frontend's rewrites keep onnxruntime's outputs (within the where-mask
bound: the feeds keep a key unmasked and the scores small), the conversion is one Mrvl subgraph
and the artifact passes verify. Quick profile by default (a tenth of its examples: each is a
conversion and a verify)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.models import canonicalized, run_ort
from support.strategies.attn import attention_models, reduce_sum_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10))


@_FEW
@given(case=attention_models())
def test_the_rewrites_keep_onnxruntime_outputs(case):
    _, proto = canonicalized(case.model)
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape
        # bit-equal weights; the FCs after them are the same ops on the same values
        assert np.array_equal(got[name], value), name


@_FEW
@given(case=attention_models())
def test_an_attention_block_is_one_mrvl_subgraph_and_verifies(case, tmp_path_factory):
    out = tmp_path_factory.mktemp("attn") / "art"
    result = mrvl_convert.convert(case.model, out)
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds.count("mrvl") == 1, (kinds, str(case))
    assert compare(case.model, out, [case.feeds]).passed


@given(case=reduce_sum_models())
def test_reduce_sum_rewrites_stay_within_their_bound(case):
    """ReduceSum over any one non-batch axis (frontend/token_ops.py): at most
    2 (L - 1) 2**-24 sum |x| from onnxruntime's own sum; the Expand read by the Mul is gone."""
    canonical, proto = canonicalized(case.model)
    spec = case.spec
    assert "ReduceSum" not in {n.op for n in canonical.graph.nodes}
    assert "Expand" not in {n.op for n in canonical.graph.nodes}
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    x = case.feeds["x"]
    if spec["expand"]:  # the ReduceSum reads x times its last-axis mean
        x = x * x.mean(axis=-1, keepdims=True, dtype=np.float32)
    x = np.abs(x.astype(np.float64))
    length = spec["shape"][spec["axis"]]
    bound = 2 * (length - 1) * 2.0 ** -24 * x.sum(axis=spec["axis"],
                                                   keepdims=bool(spec["keepdims"]))
    for name, value in want.items():
        assert got[name].shape == value.shape
        assert np.all(np.abs(got[name].astype(np.float64) - value) <= bound)
