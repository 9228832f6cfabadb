"""Property tests of frontend/norm_range.py (tests/support/strategies/t5range.py): a norm's input
scaled by 2**-k is bit-equal on onnxruntime for every form, weight scale and k drawn; an RMSNorm
encoder whose squares overflow fp16 converts, with the k that verify/norm_scales.py chooses, into
an artifact that runs without a range error and passes verify. Quick profile by default."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from hypothesis import given, settings

import mrvl_convert
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.norm_range import scale_norms
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.norm_scales import norm_scales
from support.norm_models import NORM, norm_model
from support.strategies.t5range import overflowing_encoders, scaled_norm_specs

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


def _outputs(model, feed):
    return ort.InferenceSession(model.SerializeToString()).run(None, feed)


@given(spec=scaled_norm_specs())
def test_a_scaled_norm_is_bit_equal(spec):
    model = norm_model(spec["form"], spec["weight_scale"], spec["seed"])
    graph = gs.import_onnx(model)
    done = Rewrites()
    scale_norms(graph, {NORM: spec["k"]}, done)
    assert NORM in done.rewritten
    scaled = gs.export_onnx(graph.cleanup().toposort())
    x = np.random.default_rng(spec["input_seed"]).standard_normal((1, 8, 16)).astype(np.float32)
    for got, want in zip(_outputs(scaled, {"x": x}), _outputs(model, {"x": x})):
        np.testing.assert_array_equal(got, want)


@_FEW
@given(case=overflowing_encoders())
def test_an_overflowing_encoder_verifies_with_its_chosen_scales(case, tmp_path_factory):
    scales = norm_scales(case.model, [case.feeds])
    assert scales, str(case)  # its squares exceed fp16: some norm is chosen
    out = tmp_path_factory.mktemp("t5range") / "art"
    result = mrvl_convert.convert(case.model, out, norm_scales=scales)
    said = {e["name"]: e.get("canonical", "") for e in result.report["nodes"]}
    assert all("frontend/norm_range.py" in said[key] or "frontend/residual_range.py" in said[key]
               for key in scales), said
    comparison = compare(case.model, out, [case.feeds])
    assert not comparison.overflow, comparison.overflow
    assert comparison.passed, comparison.summary_line()
