"""A layer ``--keep-fp16`` leaves in float takes its activation with it, and both stay on the
accelerator: MobileNetV3-small's squeeze-excite Conv -> HardSigmoid kept in float is an fp16
island between quant layers of the one Mrvl stage, not a CPU stage between two Mrvl ones. The
island rounds in fp16 where onnxruntime's QDQ run computes in float32, so the output may be a
few int8 steps away from it, not bit-equal; against the fp32 model it is as close as that run
(what a user keeps a layer in float for), and report.json names the island's layers among the
forms that are not exact by construction."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort

import mrvl_convert
from mrvl_convert.quantize import Quantization

from support.corpus_int8 import int8_corpus

KEPT = ["Conv_24", "HardSigmoid_25"]  # the first squeeze-excite gate's expanding Conv


def _qdq_run(path, feed):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def test_a_kept_conv_and_its_hardsigmoid_stay_in_the_one_mrvl_stage(tmp_path):
    model = int8_corpus("mobilenet_v3_small")
    rng = np.random.default_rng(0)
    calibration = {"x": rng.uniform(-1, 1, (16, 3, 64, 64)).astype(np.float32)}
    result = mrvl_convert.convert(model, tmp_path / "a",
                                  quantize=Quantization(calibration, keep_fp16=KEPT))
    cpu = {n["name"]: n.get("reason") for n in result.report["nodes"]
           if n["placement"] == "cpu"}
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], cpu
    placed = {n["name"]: n for n in result.report["nodes"]}
    assert all(placed[name]["placement"] == "mrvl" for name in KEPT)
    inexact = {n for form in result.report.get("int8_forms", []) for n in form["source_nodes"]}
    assert "Conv_24" in inexact, result.report.get("int8_forms")
    session = mrvl_convert.HybridSession(result.out_dir)
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = rng.uniform(-1, 1, (8, 1, 3, 64, 64)).astype(np.float32)
    ours = [_cosine(session.run(None, {"x": f})[0], fp32.run(None, {"x": f})[0]) for f in feeds]
    theirs = [_cosine(_qdq_run(qdq, {"x": f}), fp32.run(None, {"x": f})[0]) for f in feeds]
    assert min(ours) >= min(theirs) - 0.01, (ours, theirs)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
