"""Bit-exactness on the corpus (issue 19): QDQ models from Marvell's quantize_static recipe (the
example MNIST CNN, the corpus's ResNet-50 and MobileNetV2-like CNN), converted; the int8 hybrid's
output equals onnxruntime's run of the same QDQ model within 1 quantization step on >= 99.9% of
the elements and within 2 on all. BatchNormalization is folded into the Conv before quantizing
(``mrvl_convert/quantize/fold_bn.py``; tests/quantize/test_fold_bn.py), so every Conv is int8 and
each model is one Mrvl subgraph.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.quantize.recipe import load_calibration, quantize_int8
from support import corpus
from support.int8 import EXAMPLE, output_scale, placements, run_both, steps

pytestmark = pytest.mark.system


def _quantized_corpus_model(tmp_path: Path, model: onnx.ModelProto, samples: int):
    src = tmp_path / "float.onnx"
    onnx.save(model, src)
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    calibration = {name: rng.standard_normal([8] + shape[1:]).astype(np.float32)}
    qdq = quantize_int8(src, tmp_path / "q.onnx", calibration)
    feeds = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)]
    return qdq, feeds


def _assert_issue_target(qdq: Path, result, feeds) -> None:
    got, want = run_both(qdq, result.out_dir, feeds)
    diff = steps(got, want, output_scale(onnx.load(qdq)))
    assert np.mean(diff <= 1) >= 0.999, np.bincount(diff.astype(int).ravel())
    assert diff.max() <= 2, np.bincount(diff.astype(int).ravel())


def _mrvl_stages(result) -> int:
    return sum(s["kind"] == "mrvl" for s in result.manifest["stages"])


@pytest.mark.parametrize("name", ["mobilenet_v2",
                                  pytest.param("resnet50", marks=pytest.mark.slow)])
def test_corpus_int8_is_one_mrvl_subgraph_within_one_step(tmp_path, name):
    """Every Conv, Relu6 (Clip, and Min(Relu(x), 6) as a requant), residual Add, pool and the
    FC int8 on the accelerator in one subgraph (ResNet-50's final Softmax stays on CPU: the set
    has no int8 Softmax); the hybrid meets the issue's numbers."""
    if name == "resnet50" and name not in corpus.zoo_names():
        if os.environ.get("CI") == "true":  # .ci/run runs -m slow: a skip there would hide it
            pytest.fail("CI=true but this onnx wheel has no light ResNet-50")
        pytest.skip("this onnx wheel has no light ResNet-50")
    model = corpus.built(name) if name in corpus.BUILT else corpus.zoo(name)
    qdq, feeds = _quantized_corpus_model(tmp_path, model, samples=2 if name == "resnet50" else 20)
    ops = {n.op_type for n in onnx.load(qdq).graph.node}
    assert "BatchNormalization" not in ops and "Conv" in ops
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert _mrvl_stages(result) == 1
    on_cpu = {p["op_type"] for p in placements(result).values() if p["placement"] == "cpu"}
    assert on_cpu <= {"Softmax", "QuantizeLinear", "DequantizeLinear"}, on_cpu
    assert result.summary["mrvl_mac_share"] == 1.0
    _assert_issue_target(qdq, result, feeds)


def test_example_int8_is_one_mrvl_subgraph_within_one_step(tmp_path):
    images = load_calibration(EXAMPLE / "heldout.npz", EXAMPLE / "mnist_cnn.onnx")["input"]
    qdq = quantize_int8(EXAMPLE / "mnist_cnn.onnx", tmp_path / "q.onnx", {"input": images[:64]})
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert _mrvl_stages(result) == 1
    _assert_issue_target(qdq, result, [{"input": images[i:i + 1]} for i in range(64, 264)])
