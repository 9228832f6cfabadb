"""--estimate on int8 artifacts: int8 layers are costed with the profile's int8 section (an
assumption, docs/ESTIMATE.md), 1-byte weights and activations, and int8 boundary tensors."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import mrvl_convert
from mrvl_convert.estimate import estimate_artifact, load_profile
from mrvl_convert.quantize.recipe import Quantization
from support.int8 import needs_relu_sharing_scale

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_cnn"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The example converted as it is (fp16) and quantized (int8), with --estimate."""
    tmp = tmp_path_factory.mktemp("est")
    fp16 = mrvl_convert.convert(EXAMPLE / "mnist_cnn.onnx", tmp / "fp16", estimate=True)
    int8 = mrvl_convert.convert(EXAMPLE / "mnist_cnn.onnx", tmp / "int8", estimate=True,
                                quantize=Quantization(str(EXAMPLE / "heldout.npz")))
    return fp16, int8


def _layers(result, kind):
    return {tuple(layer["source_nodes"]): layer
            for stage in result.report["estimate"]["stages"] if stage["kind"] == "mrvl"
            for layer in stage["layers"] if layer["kind"] == kind}


@needs_relu_sharing_scale
@pytest.mark.parametrize("kind", ["Conv2D", "FC"])
def test_int8_matmul_layers_use_the_int8_rate_and_sizes(artifacts, kind):
    fp16, int8 = artifacts
    profile = load_profile()
    ratio = profile.int8.macs_per_cycle_per_tile / profile.macs_per_cycle_per_tile
    a, b = _layers(fp16, kind), _layers(int8, kind)
    assert a and len(a) == len(b)
    for layer_a, layer_b in zip(sorted(a.values(), key=lambda l: l["layer"]),
                                sorted(b.values(), key=lambda l: l["layer"])):
        assert (layer_a["dtype"], layer_b["dtype"]) == ("float32", "int8")  # fp16 layers: upstream writes float32
        assert layer_a["macs"] == layer_b["macs"]
        assert abs(layer_b["compute_cycles"] - layer_a["compute_cycles"] / ratio) <= 1, \
            (layer_a, layer_b)
        assert layer_b["weight_bytes"] < layer_a["weight_bytes"]
        assert layer_b["activation_bytes"] * 2 == layer_a["activation_bytes"]
    assert int8.report["estimate"]["profile"]["int8"]["macs_per_cycle_per_tile"] == \
        profile.int8.macs_per_cycle_per_tile
    assert int8.report["estimate"]["mrvl_microseconds"] < fp16.report["estimate"]["mrvl_microseconds"]


def test_profile_without_int8_section_keeps_the_fp16_rate(artifacts, tmp_path):
    _, int8 = artifacts
    text = (Path(mrvl_convert.__file__).parent / "estimate" / "cn10ka_fp16.yaml").read_text()
    data = yaml.safe_load(text)
    del data["int8"]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    default = estimate_artifact(int8.out_dir)
    plain = estimate_artifact(int8.out_dir, tmp_path / "p.yaml")
    conv = [l for s in plain["stages"] if s["kind"] == "mrvl" for l in s["layers"]
            if l["kind"] == "Conv2D"]
    conv_default = [l for s in default["stages"] if s["kind"] == "mrvl" for l in s["layers"]
                    if l["kind"] == "Conv2D"]
    for a, b in zip(conv, conv_default):
        assert abs(a["compute_cycles"] - 2 * b["compute_cycles"]) <= 2
        assert a["weight_bytes"] == b["weight_bytes"]  # int8 element sizes either way


def test_int8_boundary_tensor_moves_one_byte_elements(tmp_path):
    """With the int8 region's edges on CPU, the Mrvl stage's inputs and outputs are int8."""
    result = mrvl_convert.convert(EXAMPLE / "mnist_cnn.onnx", tmp_path / "out", estimate=True,
                                  quantize=Quantization(str(EXAMPLE / "heldout.npz")),
                                  deny=["input_QuantizeLinear", "logits_DequantizeLinear"])
    mrvl = next(s for s in result.manifest["stages"] if s["kind"] == "mrvl")
    assert mrvl["inputs"][0]["dtype"] == "int8"
    rows = {r["tensor"]: r for r in result.report["estimate"]["boundaries"]}
    row = rows[mrvl["inputs"][0]["tensor"]]
    assert row["bytes"] == 28 * 28 and row["cut"]
