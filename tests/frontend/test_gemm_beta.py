"""frontend/canonical_forms.py: a Gemm with beta=0 (tf2onnx's Dense without bias) drops C and
beta, bit for bit on onnxruntime, so the int8 FC rule (which refuses a beta that would scale
its int32 bias) takes it."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from mrvl_convert.quantize import Quantization
from support.models import Builder, canonicalized, run_ort


def gemm_model(bias) -> onnx.ModelProto:
    b = Builder(opset=13)
    x = b.op("Relu", [b.input("x", [3, 8])])
    inputs = [x, b.weight(5, 8)] + ([] if bias is None else [b.const(bias)])
    return b.model([b.op("Relu", [b.op("Gemm", inputs, transB=1, beta=0.0)])])


def gemm_of(model: onnx.ModelProto):
    canonical = canonicalize(load_model(model))
    gemm, = [n for n in canonical.graph.nodes if n.op == "Gemm"]
    return canonical, gemm


def assert_bit_equal(model: onnx.ModelProto) -> None:
    x = {"x": np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)}
    want, got = run_ort(model, x), run_ort(canonicalized(model)[1], x)
    assert all(np.array_equal(got[k], v) for k, v in want.items())


@pytest.mark.parametrize("bias", [None, np.full(5, 0.5, np.float32)])
def test_beta_zero_drops_c_and_beta(bias):
    model = gemm_model(bias)
    canonical, gemm = gemm_of(model)
    assert len(gemm.inputs) == 2 and "beta" not in gemm.attrs
    assert "beta=0" in canonical.rewritten[gemm.name]
    assert_bit_equal(model)


def test_a_c_with_inf_stays():
    model = gemm_model(np.array([0, np.inf, 0, 0, 0], np.float32))
    _, gemm = gemm_of(model)
    assert len(gemm.inputs) == 3 and gemm.attrs["beta"] == 0.0
    assert_bit_equal(model)


def test_an_int8_gemm_with_beta_zero_is_on_the_accelerator(tmp_path):
    model = gemm_model(None)
    rng = np.random.default_rng(1)
    calibration = {"x": rng.standard_normal((48, 8)).astype(np.float32)}
    result = mrvl_convert.convert(model, tmp_path / "o", quantize=Quantization(calibration))
    nodes = json.loads((result.out_dir / "report.json").read_text())["nodes"]
    gemm, = [n for n in nodes if n["op_type"] == "Gemm"]
    assert (gemm["placement"], gemm["rule"]) == ("mrvl", "mrvl.qnn_fc_ni2no")
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    feeds = [{"x": rng.standard_normal((3, 8)).astype(np.float32)} for _ in range(4)]
    assert mrvl_convert.compare(qdq, result.out_dir, feeds).passed
