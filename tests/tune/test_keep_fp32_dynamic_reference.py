"""``--keep-fp32 auto`` on another quantizer's model judges as ``mrvl-verify`` judges: against
the form the artifact was converted from and keeps (here quantize_dynamic's MatMulIntegers as
float MatMuls), not the model as given. Against the given model, the run-time uint8
quantization of the activations, which the rewrite removes, counted as fp16's error: auto
said "a converter defect", kept every layer in fp32 (all the MACs on the CPU) and still
FAILed (the T5 encoder: max_rel ~1 on 0/1 ids where the artifact is within 0.25 of its float
form)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from mrvl_convert.frontend.foreign_kept import kept_reference
from mrvl_convert.tune.keep_fp32 import convert_keep_fp32, judged_against
from mrvl_convert.verify.reference import random_feeds
from mrvl_convert.runtime.session import HybridSession
from support.dynamic_int8 import dynamic
from support.models import Builder


def _dynamic_mlp(tmp_path: Path) -> Path:
    """x[1, 512] -> MatMul+Add -> Relu -> MatMul+Add, through quantize_dynamic."""
    b = Builder(3)
    x = b.input("x", [1, 512])
    model = b.model([b.matmul_add(b.op("Relu", [b.matmul_add(x, 512, 64)]), 64, 8)])
    path = tmp_path / "mlp.onnx"
    onnx.save(dynamic(tmp_path, model, "mlp_q"), str(path))
    return path


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_auto_keeps_nothing_where_the_artifact_matches_the_form_it_keeps(tmp_path):
    path = _dynamic_mlp(tmp_path)
    result = convert_keep_fp32(str(path), tmp_path / "out", "auto")
    assert result.before["passed"], result.before["line"]
    assert result.kept == [] and result.rounds == []
    kept = kept_reference(tmp_path / "out")
    assert kept is not None and kept.name == "mlp.float.onnx"
    assert judged_against(str(path), tmp_path / "out") == kept
    # what the old reference measured is the given model's own run-time quantization: the
    # artifact is far closer to its float form than the given model is
    session = HybridSession(tmp_path / "out")
    given = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    float_form = ort.InferenceSession(str(kept), providers=["CPUExecutionProvider"])
    for feed in random_feeds(session.input_specs, 0, 4):
        got = np.asarray(session.run(None, feed)[0])
        want = float_form.run(None, feed)[0]
        assert _rel(got, want) < 0.002 < _rel(given.run(None, feed)[0], want)


def test_a_float_model_is_judged_against_itself(tmp_path):
    b = Builder(5)
    x = b.input("x", [1, 16])
    path = tmp_path / "fc.onnx"
    onnx.save(b.model([b.matmul_add(x, 16, 4)]), str(path))
    result = convert_keep_fp32(str(path), tmp_path / "out", "auto")
    assert result.before["passed"] and result.kept == []
    assert kept_reference(tmp_path / "out") is None
    assert judged_against(str(path), tmp_path / "out") == str(path)
