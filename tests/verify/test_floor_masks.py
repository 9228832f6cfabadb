"""The fp16 floor clamps an additive attention mask's finfo(float32).min constant to -32752 as
the converter does (``verify/floor_masks.py``). Rounded as given, -3.4e38 is -inf in fp16 and
``(1 - mask) * -inf`` is NaN at every unmasked position: the T5 encoder's (traceforge) floor was
NaN on 0/1-id inputs, so its verdict had no floor."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.mask_constants import MASK_FLOOR
from mrvl_convert.verify.floor_masks import clamp_floor_masks
from mrvl_convert.verify.fp16_floor import floor_model, fp16_floor
from support.strategies.t5floor import LOWEST, masked_attention


def feed() -> dict:
    mask = np.array([[1, 1, 1, 1, 0, 0]], np.int64)  # 0/1 as a tokenizer gives it
    return {"scores": np.random.default_rng(1).standard_normal((1, 2, 6, 6)).astype(np.float32),
            "mask": mask}


def run(model: onnx.ModelProto) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feed())[0]


def test_floor_of_a_finfo_min_mask_is_finite_and_the_artifacts_rounding():
    given = masked_attention(LOWEST)
    floor = run(floor_model(given))
    assert np.isfinite(floor).all()  # NaN everywhere on integ10
    # the floor of the form the artifact computes (the constant clamped by the frontend)
    artifact_form = run(floor_model(masked_attention(MASK_FLOOR)))
    assert np.array_equal(floor, artifact_form)
    want = run(given)
    # the clamp is exact here (mask_constants' bound): only fp16 rounding is left
    assert np.array_equal(run(masked_attention(MASK_FLOOR)), want)
    error = float(np.abs(floor - want).max())
    assert 0 < error < 4e-3 * float(np.abs(want).max())


def test_fp16_floor_measures_a_finite_error():
    given = masked_attention(LOWEST)
    want = run(given)
    result = fp16_floor(given, "masked_attention", ["out"], [feed()], {"out": [want]})
    assert result.note == ""
    worst = result.outputs["out"]
    assert worst.finite and 0 < worst.max_rel < 4e-3


def test_a_stage_boundary_output_on_the_mask_path_is_not_the_floors():
    """A verdict's reference also outputs its stage-boundary tensors (T5's mask plus position
    bias is one): the floor measures only the model's outputs, so the mask is still clamped."""
    given = masked_attention(LOWEST)
    given.graph.output.append(helper.make_tensor_value_info("masked", TensorProto.FLOAT, None))
    want = run(given)
    result = fp16_floor(given, "masked_attention", ["out"], [feed()], {"out": [want]})
    assert result.outputs["out"].finite and 0 < result.outputs["out"].max_rel < 4e-3


def test_a_constant_that_is_no_additive_mask_is_left_alone():
    model = masked_attention(LOWEST, softmax=False)  # the masked scores are an output
    before = model.SerializeToString()
    assert clamp_floor_masks(model, ["masked"]) == 0
    assert model.SerializeToString() == before


def test_the_clamp_changes_only_the_mask_constant():
    model = masked_attention(LOWEST)
    assert clamp_floor_masks(model, ["out"]) == 1
    mul = next(n for n in model.graph.node if n.name == "mask_mul")
    clamped = next(t for t in model.graph.initializer if t.name == mul.input[1])
    assert numpy_helper.to_array(clamped) == np.float32(MASK_FLOOR)
    assert np.array_equal(run(model), run(masked_attention(LOWEST)))  # exact: its bound
