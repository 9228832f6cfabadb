"""An fp16 overflow of the model's own (verify/fp16_overflow.py): an RMSNorm encoder whose
residual stream reaches ~1200, so its squares reach ~1e6 in float32, beyond fp16's 65504. verify
names the tensor and its float32 peak and says it is not a converter defect (before: the output
only failed, the fp16 range events read as the converter's layers'); a non-finite fp16 floor
says so; ``--keep-fp32 auto`` scales the overflowing norms first (frontend/norm_range.py) and then
passes with every MAC still on the accelerator; a decomposition's partial result overflowing where the model stays in
range is not called the model's."""
from __future__ import annotations

import numpy as np
import onnx

import mrvl_convert
from mrvl_convert.tune.keep_fp32 import VerifySettings, convert_keep_fp32
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.fp16_overflow import model_overflow
from mrvl_convert.verify.report import judge
from support.models import Builder
from support.strategies.norms import norms_from_spec

SPEC = {"seed": 0, "opset": 13, "tokens": 8, "channels": 16, "blocks": 1, "norm": "div_one",
        "pow2": True, "eps": 1e-6, "scale": 400.0}


def _feeds(count: int):
    return [{"x": (np.random.default_rng(s).standard_normal((1, 8, 16)) * 400)
             .astype(np.float32)} for s in range(count)]


def test_verify_names_the_models_own_overflow(tmp_path):
    case = norms_from_spec(SPEC)
    mrvl_convert.convert(case.model, tmp_path / "art")
    check = compare(case.model, tmp_path / "art", [case.feeds])
    assert not check.passed
    squares = (case.feeds["x"].astype(np.float64) ** 2).max()
    assert check.overflow.startswith("fp16 overflows in the model itself: norm0_pow_out "
                                     f"reaches {np.float32(squares):.3g} in float32")
    assert check.overflow_nodes[:3] == ["norm0_pow", "norm0_mean", "norm0_eps"]
    assert "norm0_sqrt" in check.overflow_nodes  # reads the sum beyond 65504
    line = check.summary_line()
    assert check.overflow in line and "converter defect, not fp16" not in line
    assert "fails where fp16 overflows in the model itself" in check.format_table()
    assert check.to_dict()["overflow"] == check.overflow


def test_a_partial_result_overflowing_is_not_the_models():
    """The model's own values within range: no tensor is named (a LayerNorm's d * d is the
    converter's partial result, not a tensor of the model)."""
    b = Builder()
    x = b.input("x", [1, 2, 8])
    mean = b.op("ReduceMean", [x], name="mean", axes=[-1], keepdims=1)
    model = b.model([b.op("Sub", [x, mean], name="centred")])
    feed = {"x": np.full((1, 2, 8), 300.0, np.float32)}
    assert model_overflow(model, ["mean", "centred"], [feed]).tensors == []
    assert model_overflow(model, ["no_such_node"], [feed]).line() == ""


def test_a_floor_that_is_not_finite_is_not_called_a_converter_defect():
    said = judge(float("inf"), float("inf"))
    assert "not finite" in said and "not a converter defect" in said
    assert "converter defect, not fp16" in judge(1.0, 0.01)


def test_keep_fp32_auto_scales_the_overflowing_norms_first_and_passes(tmp_path):
    """The overflow is the norms' squares: auto scales those norms (frontend/norm_range.py)
    before it would keep anything, and then nothing is kept (before: their nodes were kept in
    fp32 on the CPU)."""
    path = tmp_path / "m.onnx"
    onnx.save(norms_from_spec(SPEC).model, path)
    result = convert_keep_fp32(path, tmp_path / "art", "auto",
                               verify=VerifySettings(inputs=_feeds(4)))
    first = result.rounds[0]
    assert first["layer"] == "(norm range)" and "norm0_mean" in first["nodes"]
    assert result.kept == [] and "norm0_mean" in result.norm_scales
    assert result.before["passed"] is False and result.after["passed"] is True
    assert result.held_out["after"]["passed"] is True
