"""Real mobile networks stay one accelerator subgraph in int8, and compute what onnxruntime
computes for their QDQ model, exactly.

The int8 corpus (``tests/support/corpus_int8.py``: MobileNetV2, MobileNetV3-small, a PRelu
net, a U-Net, seeded weights): each is one Mrvl subgraph in fp16,
quantized by Marvell's recipe (``Quantization``, 16 seeded calibration samples in [-1, 1]) it
is one Mrvl subgraph with no CPU part in int8 too, no layer's form is inexact (report.json has
no ``int8_forms``), and its output is onnxruntime's run of the QDQ model as written, to the
bit, on 20 seeded inputs in the default run and on 200 under ``-m slow``.
"""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import mrvl_convert
from mrvl_convert.quantize import Quantization

from support.corpus_int8 import MODELS


def _shape(model: onnx.ModelProto) -> List[int]:
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def _reference(qdq: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    return ort.InferenceSession(str(qdq), options, providers=["CPUExecutionProvider"])


def _convert(name: str, out: Path, **options):
    model = MODELS[name]()
    rng = np.random.default_rng(0)
    calibration = {model.graph.input[0].name:
                   rng.uniform(-1, 1, [16] + _shape(model)[1:]).astype(np.float32)}
    if options.get("int8", True):
        return model, mrvl_convert.convert(model, out, quantize=Quantization(calibration))
    return model, mrvl_convert.convert(model, out)


def _assert_int8_exact(tmp_path: Path, name: str, inputs: int) -> None:
    model, result = _convert(name, tmp_path / "int8")
    stages = [s["kind"] for s in result.manifest["stages"]]
    cpu = {n["name"]: n.get("reason") for n in result.report["nodes"] if n["placement"] == "cpu"}
    assert stages == ["mrvl"], cpu
    assert "int8_forms" not in result.report, result.report["int8_forms"]
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    hybrid, reference = mrvl_convert.HybridSession(result.out_dir), _reference(qdq)
    feeds = np.random.default_rng(1).uniform(-1, 1, [inputs] + _shape(model)[1:])
    input_name = model.graph.input[0].name
    off = []
    for k, sample in enumerate(feeds.astype(np.float32)):
        feed = {input_name: sample[None]}
        got, want = hybrid.run(None, feed)[0], reference.run(None, feed)[0]
        if not np.array_equal(got, want):
            off.append(k)
    assert not off, f"{len(off)} of {inputs} inputs differ from onnxruntime's QDQ run: {off[:10]}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_mobile_net_is_one_mrvl_subgraph_in_fp16_and_in_int8_exactly(tmp_path, name):
    _, fp16 = _convert(name, tmp_path / "fp16", int8=False)
    assert [s["kind"] for s in fp16.manifest["stages"]] == ["mrvl"]
    _assert_int8_exact(tmp_path, name, inputs=20)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_mobile_net_int8_equals_onnxruntime_on_200_inputs(tmp_path, name):
    _assert_int8_exact(tmp_path, name, inputs=200)
