"""A layer ``--keep-fp16`` leaves in float takes its activation with it, and both stay on the
accelerator: MobileNetV3-small's squeeze-excite Conv -> HardSigmoid kept in float, its stem
Conv before a HardSwish, MobileNetV2's Conv after a Relu6 written Min(Relu(x), 6) whose Relu
the int8 model quantized apart: each an fp16 island between quant layers of the one Mrvl stage,
not a CPU stage between two Mrvl ones. The
island rounds in fp16 where onnxruntime's QDQ run computes in float32, so the output may be a
few int8 steps away from it, not bit-equal; against the fp32 model it is as close as that run
(what a user keeps a layer in float for), and report.json names layers of the island among the
forms that are not exact by construction."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import mrvl_convert
from mrvl_convert.quantize import Quantization

from support.corpus_int8 import int8_corpus

CASES = [("mobilenet_v3_small", ["Conv_24", "HardSigmoid_25"]),  # a squeeze-excite gate
         ("mobilenet_v3_small", ["Conv_2"]),                     # the stem, before HardSwish
         ("mobilenet_v2", ["Conv_50"])]                          # after a lone Min(x, 6)


def _qdq_run(path, feed):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


@pytest.mark.parametrize("name,kept", CASES)
def test_a_kept_layer_and_its_activations_stay_in_the_one_mrvl_stage(tmp_path, name, kept):
    model = int8_corpus(name)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    calibration = {"x": rng.uniform(-1, 1, [16] + shape[1:]).astype(np.float32)}
    result = mrvl_convert.convert(model, tmp_path / "a",
                                  quantize=Quantization(calibration, keep_fp16=kept))
    cpu = {n["name"]: n.get("reason") for n in result.report["nodes"]
           if n["placement"] == "cpu"}
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], cpu
    placed = {n["name"]: n for n in result.report["nodes"]}
    assert all(placed[node]["placement"] == "mrvl" for node in kept)
    inexact = {n for form in result.report.get("int8_forms", []) for n in form["source_nodes"]}
    assert inexact, "an fp16 island, and no layer named as inexact"
    session = mrvl_convert.HybridSession(result.out_dir)
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = rng.uniform(-1, 1, [8, 1] + shape[1:]).astype(np.float32)
    ours = [_cosine(session.run(None, {"x": f})[0], fp32.run(None, {"x": f})[0]) for f in feeds]
    theirs = [_cosine(_qdq_run(qdq, {"x": f}), fp32.run(None, {"x": f})[0]) for f in feeds]
    assert min(ours) >= min(theirs) - 0.01, (ours, theirs)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
