"""The bundled example (the RFC's MNIST CNN, trained): what the RFC shows, reproduced."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.layers import UPSTREAM
from support.models import run_ort

pytestmark = pytest.mark.system

EXAMPLE = Path(__file__).parents[2] / "examples" / "mnist_cnn"
RFC_LAYERS = ["layout_transform", "Conv2D", "Maxpool2D", "Conv2D", "Maxpool2D", "nn.batch_flatten",
              "FC", "FC"]


def _variants():
    spec = importlib.util.spec_from_file_location("variants", EXAMPLE / "variants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model():
    return onnx.load(str(EXAMPLE / "mnist_cnn.onnx"))


@pytest.fixture(scope="module")
def images():
    data = np.load(EXAMPLE / "heldout.npz")
    return data["images"][:20]


def layer_names(out: Path, stage: dict):
    doc = json.loads((out / stage["nodes_json"]).read_text())
    return [n["attrs"]["layer_name"][0] for n in doc["nodes"] if n["op"] == "tvm_op"]


def test_single_policy_reproduces_the_rfc(tmp_path):
    result = mrvl_convert.convert(EXAMPLE / "mnist_cnn.onnx", tmp_path / "o", policy="single")
    (stage,) = result.manifest["stages"]
    assert stage["kind"] == "mrvl"
    assert layer_names(tmp_path / "o", stage) == RFC_LAYERS
    assert result.summary["cpu_nodes"] == 0


def test_sigmoid_in_the_middle(tmp_path, model):
    variant = _variants().sigmoid_variant(model)
    # The RFC's scenario: upstream v0.19 has no Sigmoid layer (the newer Marvell set has one).
    single = mrvl_convert.convert(variant, tmp_path / "s", policy="single", layer_set=UPSTREAM)
    multi = mrvl_convert.convert(variant, tmp_path / "m", policy="multi", layer_set=UPSTREAM)
    assert [s["kind"] for s in single.manifest["stages"]] == ["mrvl", "cpu"]
    assert [s["kind"] for s in multi.manifest["stages"]] == ["mrvl", "cpu", "mrvl"]
    sigmoid = [e for e in multi.report["nodes"] if e["op_type"] == "Sigmoid"][0]
    assert sigmoid["placement"] == "cpu" and sigmoid["reason"] == (
        "no rule handles op type Sigmoid; layer set marvell would take it (mrvl.sigmoid)")
    newer = mrvl_convert.convert(variant, tmp_path / "n", policy="multi")
    assert [s["kind"] for s in newer.manifest["stages"]] == ["mrvl"]


def test_nchw_flatten_variant_gives_the_same_numbers(tmp_path, model, images):
    variant = _variants().nchw_flatten_variant(model)
    assert "Transpose" not in [n.op_type for n in variant.graph.node]
    mrvl_convert.convert(variant, tmp_path / "v")
    mrvl_convert.convert(model, tmp_path / "k")
    nchw = mrvl_convert.HybridSession(tmp_path / "v")
    keras = mrvl_convert.HybridSession(tmp_path / "k")
    for image in images:
        feed = {"input": image[None]}
        a, b = nchw.run(None, feed)[0], keras.run(None, feed)[0]
        reference = run_ort(model, feed)["logits"]
        # Both feed the same fp16 arithmetic; only the order of the FC's sum differs.
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-3 * max(1.0, np.abs(reference).max()))
        assert a.argmax() == b.argmax() == reference.argmax()
