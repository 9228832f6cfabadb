"""The accelerator cost ESTIMATE: MAC counts, the public ResNet-50 anchor, monotonic sanity, profiles."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import mrvl_convert
from mrvl_convert.cli.convert import main as cli_main
from mrvl_convert.estimate import (HardwareProfileError, boundary_cycles, estimate_artifact,
                                   estimate_stage, load_profile)
from support.models import Builder, small_cnn

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_US = 5674.071            # mrvl-mlsim, ResNet-50 v1, cn10ka, fp16, 8 tiles (1 GHz)
PUBLIC_MATMUL_OPS = 3_857_973_248
PUBLIC_DMA_BYTES = 51_464_160 + 2_000   # DRAM->OCM plus OCM->DRAM
# What mrvl-mlsim loaded into DRAM before that run (the same log): figures nothing was fitted to
PUBLIC_WEIGHT_BIAS_BYTES = 51_116_064   # "Weight and Bias data: Loaded 51116064 bytes"
PUBLIC_INPUT_BYTES = 301_056            # "Batch[0] - Input[0] data: Loaded 301056 bytes"


def _bench_models():
    spec = importlib.util.spec_from_file_location("bench_models", ROOT / "benchmarks" / "models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def resnet50(tmp_path_factory):
    """torchvision-shaped ResNet-50 (seeded random weights), converted with the estimate."""
    out = tmp_path_factory.mktemp("r50") / "resnet50"
    result = mrvl_convert.convert(_bench_models().resnet(), out, estimate=True)
    return result


def test_resnet50_torchvision_shape_within_15_percent_of_the_calibration_figure(resnet50):
    """Not an independent check: the one public timing (mrvl-mlsim on ResNet-50 v1) is the
    figure ``efficiency.Conv2D`` was fitted to, and this network is v1 with the stride on the
    3x3 conv instead of the first 1x1 (6% more MACs). It shows the estimate moves by about
    what the work moves near its calibration point. No second public timing of the MLIP was
    found (docs/ESTIMATE.md); the held-out figures of that run are checked below."""
    est = resnet50.report["estimate"]
    assert est["tiles"] == 8
    assert abs(est["mrvl_microseconds"] - PUBLIC_US) / PUBLIC_US < 0.15, est["mrvl_microseconds"]
    assert "ESTIMATE" in est["note"]


def test_resnet50_weight_and_input_bytes_equal_what_mlsim_loaded(resnet50):
    """Held out of the calibration: the bytes of fp16 weights and fp32 biases, and of the fp16
    input, that mrvl-mlsim loaded into DRAM for the public run (the 3x3/1x1 stride placement
    changes neither)."""
    est = resnet50.report["estimate"]
    assert est["stages"][0]["weight_bytes"] == PUBLIC_WEIGHT_BIAS_BYTES
    [into] = [b for b in est["boundaries"] if b["from"] == "host"]
    assert into["bytes"] == PUBLIC_INPUT_BYTES


def test_resnet50_mac_count_is_exact(resnet50):
    # torchvision's ResNet-50 (stride on the 3x3 conv): 4,089,184,256 multiply-accumulates
    assert resnet50.report["estimate"]["matmul_macs"] == 4_089_184_256


def test_resnet50_ddr_traffic_matches_the_public_dma_figure(resnet50):
    stage = resnet50.report["estimate"]["stages"][0]
    # fp16 weights, fp32 biases, the input in and the logits out: the notebook's DMA totals
    assert abs(stage["ddr_bytes"] - PUBLIC_DMA_BYTES) / PUBLIC_DMA_BYTES < 0.01


def test_estimate_is_a_function_of_the_artifact(resnet50):
    assert estimate_artifact(resnet50.out_dir) == resnet50.report["estimate"]


def test_more_tiles_never_slower(resnet50):
    runs = [estimate_artifact(resnet50.out_dir, tiles=t) for t in (1, 2, 4, 8)]
    totals = [r["mrvl_cycles"] for r in runs]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
    for fewer, more in zip(runs, runs[1:]):
        for a, b in zip(fewer["stages"][0]["layers"], more["stages"][0]["layers"]):
            assert b["cycles"] <= a["cycles"], a["layer"]


def test_layer_never_below_its_compute_or_memory_bound(resnet50):
    for tiles in (1, 8):
        for layer in estimate_artifact(resnet50.out_dir, tiles=tiles)["stages"][0]["layers"]:
            assert layer["cycles"] >= layer["compute_cycles"]
            assert layer["cycles"] >= layer["memory_cycles"]
    bounds = {layer["bound"] for layer in resnet50.report["estimate"]["stages"][0]["layers"]}
    assert {"compute", "memory"} <= bounds


def _cnn(size: int):
    b = Builder(0)
    x = b.input("x", [1, 3, size, size])
    y = b.op("Relu", [b.conv(x, 3, 16, pads=[1, 1, 1, 1])])
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Relu", [b.conv(y, 16, 32, pads=[1, 1, 1, 1])])
    y = b.op("GlobalAveragePool", [y])
    return b.model([y], ir_version=10)


def test_larger_input_never_faster(tmp_path):
    totals = []
    for size in (16, 32, 64, 128):
        result = mrvl_convert.convert(_cnn(size), tmp_path / f"cnn{size}", estimate=True)
        totals.append(result.report["estimate"]["mrvl_cycles"])
    assert totals == sorted(totals) and totals[0] < totals[-1]


def test_cut_between_stages_is_costed(tmp_path):
    result = mrvl_convert.convert(small_cnn(sigmoid=True), tmp_path / "cut", estimate=True)
    est = result.report["estimate"]
    kinds = [s["kind"] for s in est["stages"]]
    assert kinds == ["mrvl", "cpu", "mrvl"]
    assert est["stages"][1]["cycles"] is None          # CPU stages are not estimated
    cuts = [b for b in est["boundaries"] if b["cut"]]
    assert len(cuts) == 2
    prof = load_profile()
    for cut in cuts:
        assert cut["cycles"] == round(boundary_cycles(cut["bytes"] // 2, prof))
    assert est["transfer_cycles"] == sum(b["cycles"] for b in est["boundaries"])
    assert est["total_microseconds"] == pytest.approx(
        est["mrvl_microseconds"] + est["transfer_microseconds"], abs=0.01)


def test_report_keeps_its_fields_and_adds_estimate(tmp_path):
    plain = mrvl_convert.convert(small_cnn(), tmp_path / "a").report
    with_est = mrvl_convert.convert(small_cnn(), tmp_path / "b", estimate=True).report
    assert {k: v for k, v in with_est.items() if k not in ("estimate", "device")} == \
        {k: v for k, v in plain.items() if k != "device"}
    # the device check runs either way; with the estimate its OCM rows carry the estimate's cost
    assert with_est["device"]["reasons"] == plain["device"]["reasons"]
    assert [s["spill_microseconds"] for s in plain["device"]["ocm"]["subgraphs"]] == [None]
    assert [s["spill_microseconds"] for s in with_est["device"]["ocm"]["subgraphs"]] == [0]
    on_disk = json.loads((tmp_path / "b" / "report.json").read_text())
    assert on_disk["estimate"] == with_est["estimate"]


def test_estimate_stage_for_partitioners(resnet50):
    doc = json.loads((resnet50.out_dir / "resnet50_mrvl_0-nodes.json").read_text())
    prof = load_profile()
    one, eight = estimate_stage(doc, prof, tiles=1), estimate_stage(doc, prof)
    assert eight.cycles == pytest.approx(resnet50.report["estimate"]["mrvl_cycles"], abs=1)
    assert one.microseconds > eight.microseconds
    with pytest.raises(ValueError, match="tiles"):
        estimate_stage(doc, prof, tiles=9)


def test_custom_profile_changes_the_estimate(tmp_path, resnet50):
    slow = tmp_path / "slow.yaml"
    slow.write_text(_profile_text().replace("clock_hz: 1000000000", "clock_hz: 500000000"))
    base = resnet50.report["estimate"]
    halved = estimate_artifact(resnet50.out_dir, slow)
    assert halved["mrvl_cycles"] == base["mrvl_cycles"]
    assert halved["mrvl_microseconds"] == pytest.approx(2 * base["mrvl_microseconds"], rel=1e-6)


def _profile_text() -> str:
    return (ROOT / "mrvl_convert" / "estimate" / "cn10ka_fp16.yaml").read_text()


@pytest.mark.parametrize("make, field", [
    (lambda base: "x: [", "not valid YAML"),
    (lambda base: "format_version: 1\n", "field <top level>"),
    (lambda base: base.replace("tiles: 8 ", "tiles: -1 "), "field tiles"),
    (lambda base: base.replace("  Conv2D: 0.378", "  Conv2D: 1.5"), "field efficiency.Conv2D"),
])
def test_bad_profile_is_a_clear_error(tmp_path, make, field):
    path = tmp_path / "p.yaml"
    path.write_text(make(_profile_text()))
    with pytest.raises(HardwareProfileError, match=field) as info:
        load_profile(path)
    assert str(path) in str(info.value)


def test_profile_size_is_bounded(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * 10000)
    with pytest.raises(HardwareProfileError, match="more than"):
        load_profile(path)


def test_profile_alias_bomb_and_nesting_are_bounded(tmp_path):
    """A profile is a user's document: a few hundred bytes of aliases must not expand to
    gigabytes, nor deep nesting exhaust the stack (the rule files' bounded reader)."""
    bomb = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    bomb += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    for name, text, needle in (("bomb.yaml", "\n".join(bomb) + "\n", "aliases"),
                               ("deep.yaml", "[" * 5000 + "]" * 5000, "nests deeper")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(HardwareProfileError, match=needle) as info:
            load_profile(path)
        assert str(path) in str(info.value)


def test_profile_tiles_above_max(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(_profile_text().replace("tiles: 8 ", "tiles: 16 "))
    with pytest.raises(HardwareProfileError, match="max_tiles"):
        load_profile(path)


def test_cli_estimate_table_and_bad_profile(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    model.write_bytes(small_cnn().SerializeToString())
    assert cli_main([str(model), "-o", str(tmp_path / "out"), "--estimate"]) == 0
    out = capsys.readouterr().out
    assert "ESTIMATE (not a measurement)" in out and "Mrvl stage" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("format_version: 2\n")
    assert cli_main([str(model), "-o", str(tmp_path / "out2"), "--estimate",
                     "--hw-profile", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.yaml" in err[0] and "Traceback" not in err[0]


@pytest.mark.slow
def test_resnet50_v1_public_anchor(tmp_path):
    """The model mrvl-mlsim ran (stride on the 1x1 conv): its exact matmul op count, and the
    estimate on the figure it was calibrated on."""
    result = mrvl_convert.convert(_bench_models().resnet(v1=True), tmp_path / "v1",
                                  estimate=True)
    est = result.report["estimate"]
    assert est["matmul_macs"] == PUBLIC_MATMUL_OPS
    assert abs(est["mrvl_microseconds"] - PUBLIC_US) / PUBLIC_US < 0.01
