"""The int8 recipe's mask clamp, generated (``quantize/finite.py``): for any causal mask fill
below fp16's range added to the scores, the clamped float model's output is bit-equal to the
original's, and the QDQ model our recipe writes holds no NaN constant and computes none."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings

from onnx import numpy_helper

from mrvl_convert.quantize.finite import masks_clamped
from mrvl_convert.quantize.recipe import quantize_int8
from support.models import run_ort
from support.strategies.tpint8 import causal_attentions

pytestmark = pytest.mark.system


@given(causal_attentions())
def test_the_clamped_mask_is_exact(case):
    model, x = case
    clamped = masks_clamped(model)
    assert clamped is not model
    assert np.array_equal(run_ort(clamped, {"x": x}, optimize=False)["y"],
                          run_ort(model, {"x": x}, optimize=False)["y"])


@settings(max_examples=5, deadline=None)
@given(causal_attentions())
def test_the_qdq_model_of_a_causal_mask_is_finite(tmp_path_factory, case):
    model, x = case
    folder = tmp_path_factory.mktemp("tpint8")
    onnx.save(model, str(folder / "float.onnx"))
    samples = np.random.default_rng(0).uniform(-2, 2, (8, *x.shape[1:])).astype(np.float32)
    out = quantize_int8(folder / "float.onnx", folder / "int8.onnx", {"x": samples})
    qdq = onnx.load(str(out))
    # on integ11 the mask became a constant of NaN (its int8 scale inf / 127), whose Softmax
    # rows onnxruntime's int8 output saturates: finite, every value the same
    assert all(np.isfinite(numpy_helper.to_array(t)).all() for t in qdq.graph.initializer)
    assert np.isfinite(run_ort(qdq, {"x": x}, optimize=False)["y"]).all()
