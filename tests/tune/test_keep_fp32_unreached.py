"""What ``--keep-fp32 auto`` and the verdict say when fp16 everywhere already fails and no few
layers hold the error (slanet-plus: the fp16 floor max_rel 0.0354 against a 0.01 tolerance,
78 weighted layers whose costliest weights cost the outputs 49.5 dB). The verdict advised
auto as if it would pass; auto kept three layers, failed as before, and said nothing of why."""
from __future__ import annotations

from mrvl_convert.tune.keep_fp32 import KeepFp32Result, unreached
from mrvl_convert.verify.fp16_analysis import Fp16Analysis, WeightRounding
from mrvl_convert.verify.quant_report import LayerQuality, QuantAnalysis
from mrvl_convert.verify.report import Comparison, Row
from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE


def failing(floor_rel: float, error: float = 0.043) -> Comparison:
    """One output failing at max_rel ``error`` with the given fp16 floor (peak 1)."""
    row = Row("y", "output", [1, 8], max_abs=error, max_rel=error, passed=False,
              tolerance=DEFAULT_TOLERANCE.to_dict(), floor_max_abs=floor_rel,
              floor_max_rel=floor_rel)
    return Comparison([row], samples=4)


def analysis(weight_costs):
    rows = [LayerQuality("s", f"l{k}", "Conv2D", "float32", f"t{k}", [f"conv{k}"])
            for k in range(len(weight_costs))]
    weights = {r.layer: WeightRounding(r.layer, [f"w{k}"], 50.0, snr, rel)
               for k, (r, (snr, rel)) in enumerate(zip(rows, weight_costs))}
    return Fp16Analysis(QuantAnalysis(rows, samples=4), weights)


def test_the_verdict_says_the_floor_itself_fails_tolerance():
    line = failing(0.0354).summary_line()
    assert "within 3x the fp16 floor: the model is fp16-sensitive" in line
    assert "the floor itself is outside tolerance (max_rel 0.0354 > 0.01)" in line
    assert "passes only if a few layers cause that" in line


def test_a_floor_inside_tolerance_keeps_the_plain_advice():
    line = failing(0.0095, 0.02).summary_line()
    assert "(--keep-fp32 auto keeps its costliest layers in fp32)" in line
    assert "floor itself" not in line


def test_auto_that_fails_says_the_error_is_spread():
    check = failing(0.0354)
    result = KeepFp32Result("m.onnx", ["conv0"], {"passed": False, "max_rel": 0.043},
                            {"passed": False, "max_rel": 0.042}, rounds=[{}, {}, {}],
                            analysis=analysis([(49.5, 0.0016), (51.3, 0.0012)]))
    text = unreached(check, result)
    assert text.startswith("auto did not reach PASS in 3 round(s)")
    assert "fp16 floor is itself outside tolerance (y max_rel 0.0354 > 0.01)" in text
    assert "max_rel 0.0016 (49.5 dB) of the max_rel 0.043 failing, over 2 layer(s)" in text
    assert "the error is spread over the layers" in text


def test_a_costly_layer_is_not_called_spread():
    result = KeepFp32Result("m.onnx", ["conv0"], {"passed": False, "max_rel": 0.043},
                            {"passed": False, "max_rel": 0.03}, rounds=[{}],
                            analysis=analysis([(20.0, 0.02)]))
    text = unreached(failing(0.0354), result)
    assert "max_rel 0.02 (20.0 dB)" in text and "spread" not in text
