"""Partition control: min_compute_layers (--min-compute-layers) sets how many compute-heavy
layers (Conv2D, FC...) a Mrvl region needs; 1 is upstream's rule, 0 lifts it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.cli.convert import main
from support.models import Builder, small_cnn
from support.partition import check_sound, stages


def _softmax_only():
    """Softmax then Sin: a region with no Conv or FC, then an op no layer set maps."""
    b = Builder()
    x = b.input("x", [1, 10])
    y = b.op("Softmax", [x], name="softmax", axis=1)
    return b.model([b.op("Sin", [y], name="cut")])


def _feed(shape):
    return {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}


def test_default_keeps_a_region_without_conv_or_fc_on_cpu(tmp_path):
    result = mrvl_convert.convert(_softmax_only(), tmp_path / "o")
    entry = result.placement("softmax")
    assert entry["placement"] == "cpu"
    assert "has no compute-heavy layer (Conv2D or FC)" in entry["reason"]
    assert "min_compute_layers" not in result.manifest["options"]


def test_zero_lets_a_region_without_conv_or_fc_run_on_mrvl(tmp_path):
    model = _softmax_only()
    result = mrvl_convert.convert(model, tmp_path / "o", min_compute_layers=0)
    assert stages(result) == ["mrvl", "cpu"]
    assert result.placement("softmax")["placement"] == "mrvl"
    assert result.manifest["options"]["min_compute_layers"] == 0
    check_sound(model, result, tmp_path / "o", _feed((1, 10)))


def test_zero_with_policy_single(tmp_path):
    model = _softmax_only()
    default = mrvl_convert.convert(model, tmp_path / "a", policy="single")
    assert stages(default) == ["cpu"]
    assert "has no compute-heavy layer" in default.placement("softmax")["reason"]
    lifted = mrvl_convert.convert(model, tmp_path / "b", policy="single", min_compute_layers=0)
    assert stages(lifted) == ["mrvl", "cpu"]
    check_sound(model, lifted, tmp_path / "b", _feed((1, 10)))


def test_two_sends_a_region_with_one_conv_back_to_cpu(tmp_path):
    """small_cnn(sigmoid=True): [conv] | Sin | [conv, FC, FC]: only the second region has two."""
    model = small_cnn(sigmoid=True)
    result = mrvl_convert.convert(model, tmp_path / "o", min_compute_layers=2)
    assert stages(result) == ["cpu", "mrvl"]
    early = result.placement("relu1")
    assert early["placement"] == "cpu"
    assert early["reason"].endswith("but its Mrvl region has fewer than 2 compute-heavy layers "
                                    "(Conv2D or FC), so it stays on CPU (min_compute_layers=2); "
                                    "it feeds 'sig' on CPU")
    assert result.placement("relu2")["placement"] == "mrvl"
    check_sound(model, result, tmp_path / "o", _feed((1, 3, 16, 16)))
    many = mrvl_convert.convert(model, tmp_path / "p", min_compute_layers=4)
    assert stages(many) == ["cpu"]


def test_with_max_subgraphs_the_limit_still_applies(tmp_path):
    """Three light regions (Softmax | Sin | Softmax | Sin | Softmax) lifted, then capped at 1."""
    b = Builder()
    y = b.input("x", [1, 10])
    for k in range(3):
        y = b.op("Softmax", [y], name=f"softmax{k}", axis=1)
        if k < 2:
            y = b.op("Sin", [y], name=f"cut{k}")
    model = b.model([y])
    lifted = mrvl_convert.convert(model, tmp_path / "a", min_compute_layers=0)
    assert stages(lifted) == ["mrvl", "cpu", "mrvl", "cpu", "mrvl"]
    capped = mrvl_convert.convert(model, tmp_path / "b", min_compute_layers=0, max_subgraphs=1)
    assert stages(capped).count("mrvl") == 1
    check_sound(model, capped, tmp_path / "b", _feed((1, 10)))


@pytest.mark.parametrize("bad", [-1, 1.5, "0", True, None])
def test_bad_min_compute_layers_is_refused(tmp_path, bad):
    with pytest.raises(mrvl_convert.MrvlConvertError, match="min_compute_layers"):
        mrvl_convert.convert(_softmax_only(), tmp_path / "o", min_compute_layers=bad)
    assert not (tmp_path / "o").exists()


def test_cli_flag_reaches_manifest_and_summary(tmp_path: Path):
    path = tmp_path / "soft.onnx"
    path.write_bytes(_softmax_only().SerializeToString())
    out = tmp_path / "out"
    assert main([str(path), "-o", str(out), "--min-compute-layers", "0", "-q"]) == 0
    manifest = json.loads((out / "soft" / "manifest.json").read_text())
    assert manifest["options"]["min_compute_layers"] == 0
    assert [s["kind"] for s in manifest["stages"]] == ["mrvl", "cpu"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["options"]["min_compute_layers"] == 0
    assert main([str(path), "-o", str(out), "--min-compute-layers", "-1", "-q"]) == 2
