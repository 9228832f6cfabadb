"""The device check (estimate/device.py): every limit met and missed, end to end and per rule."""
from __future__ import annotations

import json

import pytest

import mrvl_convert
from mrvl_convert.batch import convert_many
from mrvl_convert.cli.convert import main as cli_main
from mrvl_convert.emit.validate import validate
from mrvl_convert.estimate import load_profile
from mrvl_convert.estimate.device import (LIMITS, Model, Subgraph, batch, dims_per_shape,
                                          inputs_outputs, model_slots, one_device, rule)
from support.board import conv_chain, many_outputs
from support.badmodels import save
from support.corpus import zoo
from support.models import small_cnn

LIMITS_OF = load_profile().device


def _limits(report):
    return [r["limit"] for r in report["device"]["reasons"]]


def test_twenty_subgraphs_do_not_fit_and_max_subgraphs_16_does(tmp_path):
    model = conv_chain(20)
    result = mrvl_convert.convert(model, tmp_path / "a")
    assert result.summary["mrvl_subgraphs"] == 20
    device = result.report["device"]
    assert device["fits"] is False and device["slots"] == 20
    assert _limits(result.report) == ["max_models"]
    assert "16 models" in device["reasons"][0]["rule"]
    assert "--max-subgraphs 16" in device["reasons"][0]["fix"]
    capped = mrvl_convert.convert(model, tmp_path / "b", max_subgraphs=16)
    assert capped.summary["mrvl_subgraphs"] == 16
    assert capped.report["device"]["fits"] is True and capped.report["device"]["reasons"] == []


def test_cli_names_the_limit_and_summary_row_says_false(tmp_path, capsys):
    path = save(conv_chain(20), tmp_path / "chain.onnx")
    assert cli_main([str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    lines = [line for line in err if "does not fit one device" in line]
    assert len(lines) == 1 and "max_models 16" in lines[0] and "--max-subgraphs 16" in lines[0]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    validate(summary, "summary", label="summary.json")
    row = summary["models"][0]
    assert row["fits_device"] is False and row["device_reasons"][0].startswith("max_models 16")


def test_a_per_sample_batch_two_fits_as_two_runs_of_one(tmp_path):
    # the profile's max_batch 1 bounds the chunk (batch_axis.batch_runs); a true batch misfit:
    # tests/estimate/test_device_fit.py
    result = mrvl_convert.convert(small_cnn(batch=2), tmp_path / "a")
    assert [s.get("runs") for s in result.manifest["stages"]] == [2]
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    assert mrvl_convert.convert(small_cnn(), tmp_path / "b").report["device"]["fits"] is True


def test_too_many_model_outputs_do_not_fit(tmp_path):
    over = mrvl_convert.convert(many_outputs(LIMITS_OF.max_inputs_outputs + 1), tmp_path / "a")
    assert "max_inputs_outputs" in _limits(over.report)
    at = mrvl_convert.convert(many_outputs(LIMITS_OF.max_inputs_outputs), tmp_path / "b")
    assert at.report["device"]["fits"] is True


def _sub(name="s", inputs=1, outputs=1, shape=(1, 3, 8, 8)):
    return Subgraph(name, tuple((f"i{k}", shape) for k in range(inputs)),
                    tuple((f"o{k}", shape) for k in range(outputs)))


@pytest.mark.parametrize("check, over, at", [
    (model_slots, Model(tuple(_sub(f"s{k}") for k in range(17)), _sub("m")),
     Model(tuple(_sub(f"s{k}") for k in range(16)), _sub("m"))),
    (inputs_outputs, Model((_sub(inputs=33),), _sub("m")), Model((_sub(inputs=32),), _sub("m"))),
    (inputs_outputs, Model((), _sub("m", outputs=33)), Model((), _sub("m", outputs=32))),
    (dims_per_shape, Model((_sub(shape=(1,) * 9),), _sub("m")),
     Model((_sub(shape=(1,) * 8),), _sub("m"))),
    (batch, Model((_sub(shape=(2, 3)),), _sub("m")), Model((_sub(shape=(1, 3)),), _sub("m"))),
])
def test_every_limit_fails_just_over_and_passes_at_it(check, over, at):
    found = check(over, LIMITS_OF)
    assert found and all(r["rule"] == rule(check, LIMITS_OF) for r in found)
    assert check(at, LIMITS_OF) == []


def test_every_limit_has_a_rule_naming_its_figure():
    for check in LIMITS:
        text = rule(check, LIMITS_OF)
        assert "{" not in text and any(str(v) in text for v in LIMITS_OF.as_dict().values())


def test_one_device_counts_slots_of_all_models(tmp_path, capsys):
    paths = [save(conv_chain(9, seed=s), tmp_path / f"m{s}.onnx") for s in (1, 2)]
    alone = convert_many(paths, tmp_path / "alone", jobs=1)
    assert all(o.device["fits"] for o in alone)
    together = convert_many(paths, tmp_path / "together", jobs=1, one_device=True)
    assert [o.device["fits"] for o in together] == [False, False]
    summary = json.loads((tmp_path / "together" / "summary.json").read_text())
    validate(summary, "summary", label="summary.json")
    assert summary["one_device"] == {"models": 2, "slots": 18, "max_models": 16, "fits": False}
    assert all("--one-device" in row["device_reasons"][-1] for row in summary["models"])
    assert cli_main([*map(str, paths), "-o", str(tmp_path / "cli"), "-q", "--one-device"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "does not fit" in line]
    assert len(err) == 2 and all("--one-device" in line and "18 model slots" in line
                                 for line in err)
    overall, rows = one_device({"a": {"fits": True, "slots": 8, "max_models": 16,
                                      "reasons": []}, "b": {"fits": True, "slots": 8,
                                                            "max_models": 16, "reasons": []}})
    assert overall["fits"] is True and rows["a"]["fits"] is True


@pytest.mark.slow
def test_resnet50_fits_and_states_its_ocm_use(tmp_path):
    """docs/BOARD.md puts these figures beside Marvell's 97.9% of 8 MiB."""
    result = mrvl_convert.convert(zoo("resnet50"), tmp_path / "r50", estimate=True)
    device = result.report["device"]
    assert device["fits"] is True and device["slots"] == 1
    ocm = device["ocm"]
    assert ocm["capacity_bytes"] == 8 * 1024 * 1024 and ocm["tiles"] == 8
    sub = ocm["subgraphs"][0]
    # fp16 weights of ResNet-50 (25.5 M parameters) are ~6x the OCM: they stream from DDR
    assert sub["fits"] is False and sub["weight_bytes"] > 6 * ocm["capacity_bytes"]
    assert 0 < ocm["largest_layer_use"] < 1 and sub["layers_over"] == 0
    assert device["notes"] and "stream from DDR" in device["notes"][0]
    prof = load_profile()
    assert sub["stream_microseconds"] == pytest.approx(
        sub["weight_bytes"] / prof.ddr_bytes_per_cycle / prof.clock_hz * 1e6, abs=1e-3)
    assert f"{sub['stream_microseconds']:.1f} us" in device["notes"][0]
    validate(result.report, "report", label="report.json")


def _builtin_profile_text() -> str:
    from importlib import resources
    return resources.files("mrvl_convert.estimate").joinpath("cn10ka_fp16.yaml").read_text()


def test_a_profile_sets_its_own_limits(tmp_path):
    text = _builtin_profile_text().replace("max_models: 16", "max_models: 2")
    assert text != _builtin_profile_text()
    path = tmp_path / "two.yaml"
    path.write_text(text)
    report = mrvl_convert.convert(conv_chain(3), tmp_path / "a", estimate=str(path)).report
    assert report["device"]["limits"]["max_models"] == 2
    assert [r["value"] for r in report["device"]["reasons"]] == [2]
    assert "at most 2 models" in report["device"]["reasons"][0]["rule"]
    # a profile without a device section: DPDK's limits
    bare = tmp_path / "bare.yaml"
    head, tail = text.split("device:")[0], text.split("zero_cost_kinds:")[1]
    bare.write_text(head + "zero_cost_kinds:" + tail)
    assert load_profile(bare).device == LIMITS_OF


def test_a_bad_device_section_is_refused(tmp_path):
    from mrvl_convert.estimate import HardwareProfileError
    path = tmp_path / "bad.yaml"
    path.write_text(_builtin_profile_text().replace("max_dims: 8", "max_dims: 0"))
    with pytest.raises(HardwareProfileError, match="device"):
        load_profile(path)


def test_a_stage_the_cost_model_cannot_size_is_a_note_not_a_failure():
    from mrvl_convert.estimate.device import check_device
    manifest = {"model": {"inputs": [{"name": "x", "shape": [1, 4], "dtype": "float32"}],
                          "outputs": [{"name": "y", "shape": [1, 4], "dtype": "float32"}]},
                "stages": [{"kind": "mrvl", "name": "m_0",
                            "inputs": [{"tensor": "x", "shape": [1, 4]}],
                            "outputs": [{"tensor": "y", "shape": [1, 4]}]}]}
    broken = {"nodes": [{"op": "tvm_op", "name": "l0", "attrs": {}}]}   # no output shape
    device = check_device(manifest, lambda name: (broken, {}), load_profile())
    assert device["fits"] is True and device["ocm"]["subgraphs"] == []
    assert device["ocm"]["not_computed"][0].startswith("m_0: OCM use not computed")
    assert device["notes"] == device["ocm"]["not_computed"]
