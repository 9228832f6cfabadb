"""The issue's accuracy bar: the example MNIST CNN quantized with Marvell's recipe on its own
images keeps top-1 agreement with fp32 >= 99% on the 500 held-out images, and on those the
calibration did not see (benchmarks/int8_accuracy.py prints the README table)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import mrvl_convert
from mrvl_convert.quantize.recipe import Quantization

pytestmark = pytest.mark.system

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_cnn"
CALIBRATION_IMAGES = 64


def test_int8_hybrid_keeps_top1_agreement_with_fp32(tmp_path):
    data = np.load(EXAMPLE / "heldout.npz", allow_pickle=False)
    images, labels = data["images"], data["labels"]
    np.savez(tmp_path / "cal.npz", input=images[:CALIBRATION_IMAGES])
    result = mrvl_convert.convert(EXAMPLE / "mnist_cnn.onnx", tmp_path / "mnist_cnn",
                                  quantize=Quantization(str(tmp_path / "cal.npz")))
    assert result.summary["mrvl_mac_share"] == 1.0  # the int8 layers ran, not a CPU fallback
    fp32 = ort.InferenceSession(str(EXAMPLE / "mnist_cnn.onnx"),
                                providers=["CPUExecutionProvider"])
    hybrid = mrvl_convert.HybridSession(result.out_dir)
    want = np.array([fp32.run(None, {"input": x[None]})[0].argmax() for x in images])
    got = np.array([hybrid.run(None, {"input": x[None]})[0].argmax() for x in images])
    assert len(images) == 500
    assert np.mean(got == want) >= 0.99, np.mean(got == want)
    unseen = slice(CALIBRATION_IMAGES, None)
    assert np.mean(got[unseen] == want[unseen]) >= 0.99
    # and int8 costs no more than one point of accuracy against the true labels
    assert np.mean(got == labels) >= np.mean(want == labels) - 0.01
