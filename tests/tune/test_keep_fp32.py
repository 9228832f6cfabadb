"""``keep_fp32`` / ``--keep-fp32 NODE|auto``: nodes of an fp16 conversion kept in fp32 on the
CPU, chosen by the fp16 analysis until verify passes, and what that costs (issue 30)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from mrvl_convert import convert
from mrvl_convert.errors import OptionError
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.recipe import Quantization
from mrvl_convert.tune.keep_fp32 import convert_keep_fp32
from mrvl_convert.verify.compare import compare
from support.fp16_sensitive import cancelling_model


@pytest.fixture()
def model(tmp_path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(cancelling_model(), path)
    return path


def conv_macs(proto: onnx.ModelProto, name: str) -> int:
    """MACs of a Conv of ``cancelling_model`` (every output is 8x8, no groups)."""
    node = next(n for n in proto.graph.node if n.name == name)
    weight = next(t for t in proto.graph.initializer if t.name == node.input[1])
    return int(np.prod(weight.dims)) * 8 * 8


def test_the_model_fails_verify_in_fp16(model, tmp_path):
    """What the remedy is for: without it, fp16 fails --verify."""
    convert(model, tmp_path / "plain")
    assert not compare(model, tmp_path / "plain").passed


def test_auto_brings_verify_from_fail_to_pass_and_reports_the_cost(model, tmp_path):
    result = convert_keep_fp32(model, tmp_path / "art", "auto")
    assert result.before["passed"] is False and result.after["passed"] is True
    assert "conv_cancel" in result.kept and "conv_dup" not in result.kept
    assert [r["nodes"] for r in result.rounds] == [result.kept]
    assert "fp16 weights" in result.rounds[0]["why"]
    # The artifact written is the one that passes, checked here against onnxruntime anew.
    assert compare(model, tmp_path / "art").passed
    report = json.loads((tmp_path / "art" / "report.json").read_text())
    section = report["keep_fp32"]
    proto = cancelling_model()
    total = sum(conv_macs(proto, n) for n in ("conv_dup", "conv_cancel", "conv_tail"))
    assert section["mac_share_moved"] == round(conv_macs(proto, "conv_cancel") / total, 4)
    assert section["without"]["mrvl_subgraphs"] == 1 and section["without"]["transitions"] == 0
    # conv_cancel leaves the middle: Mrvl, CPU, Mrvl.
    assert (section["extra_mrvl_subgraphs"], section["extra_cpu_subgraphs"],
            section["extra_transitions"]) == (1, 1, 2)
    assert section["measured"]["before"]["passed"] is False
    assert section["measured"]["after"]["passed"] is True
    assert section["measured"]["after"]["max_rel"] < section["measured"]["before"]["max_rel"]
    placed = {e["name"]: e for e in report["nodes"]}
    assert placed["conv_cancel"]["placement"] == "cpu"
    assert "keep_fp32 conv_cancel" in placed["conv_cancel"]["reason"]
    line = result.line()
    assert "conv_cancel" in line and "FAIL" in line and "-> PASS" in line and "+2 cut" in line


def test_named_node_is_what_deny_makes_of_it(model, tmp_path):
    """Keeping a node in fp32 is refusing it to the accelerator: the stage files are those
    deny writes, and the report says why and what it cost."""
    kept = convert(model, tmp_path / "kept", keep_fp32=["conv_cancel"])
    denied = convert(model, tmp_path / "denied", deny=["conv_cancel"])
    stages = sorted(p.name for p in (tmp_path / "denied").iterdir()
                    if p.name not in ("manifest.json", "report.json"))
    assert stages and all((tmp_path / "kept" / s).read_bytes()
                          == (tmp_path / "denied" / s).read_bytes() for s in stages)
    assert kept.summary == denied.summary
    assert kept.report["keep_fp32"]["nodes"] == ["conv_cancel"]
    assert kept.manifest["options"]["keep_fp32"] == ["conv_cancel"]
    assert compare(model, tmp_path / "kept").passed


def test_named_node_measured(model, tmp_path):
    result = convert_keep_fp32(model, tmp_path / "art", ["conv_cancel"])
    assert result.kept == ["conv_cancel"] and result.rounds == []
    assert (result.before["passed"], result.after["passed"]) == (False, True)
    measured = json.loads((tmp_path / "art" / "report.json").read_text())["keep_fp32"]["measured"]
    assert measured["before"] == result.before and measured["after"] == result.after


def test_a_node_that_does_not_help_is_reported_as_such(model, tmp_path):
    result = convert_keep_fp32(model, None, ["conv_tail"])
    assert (result.before["passed"], result.after["passed"]) == (False, False)
    assert "-> FAIL" in result.line()


def test_auto_with_no_rounds_keeps_nothing(model, tmp_path):
    result = convert_keep_fp32(model, tmp_path / "art", "auto", max_rounds=0)
    assert result.kept == [] and result.after["passed"] is False
    assert "keep_fp32" not in json.loads((tmp_path / "art" / "report.json").read_text())
    assert "nothing kept" in result.line()


@pytest.mark.parametrize("kwargs, words", [
    ({"keep_fp32": ["auto"]}, "convert_keep_fp32"),
    ({"keep_fp32": "conv_cancel"}, "list of node names"),
    ({"keep_fp32": ["conv_cancel"], "quantize": Quantization(calibration="c.npz")},
     "keep_fp16"),
])
def test_options_refuse(kwargs, words):
    with pytest.raises(OptionError, match=words):
        ConvertOptions(**kwargs)


def test_unknown_node_is_refused(model, tmp_path):
    with pytest.raises(OptionError, match="'nope'"):
        convert(model, tmp_path / "art", keep_fp32=["nope"])
    assert not (tmp_path / "art").exists()


def test_cli_auto(model, tmp_path, capsys):
    from mrvl_convert.cli.convert import main

    code = main([str(model), "-o", str(tmp_path / "out"), "--keep-fp32", "auto", "--verify"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    line = next(x for x in printed.splitlines() if x.startswith("keep-fp32 "))
    assert "conv_cancel" in line and "FAIL" in line and "-> PASS" in line
    section = json.loads((tmp_path / "out" / "m" / "report.json").read_text())["keep_fp32"]
    assert "conv_cancel" in section["nodes"] and section["measured"]["after"]["passed"]


@pytest.mark.parametrize("extra, words", [
    (["--quantize", "int8", "--calibration", "c.npz"], "--keep-fp16"),
    (["SECOND"], "one model"),
])
def test_cli_refuses(model, tmp_path, capsys, extra, words):
    from mrvl_convert.cli.convert import main

    second = tmp_path / "n.onnx"
    onnx.save(cancelling_model(seed=1), second)
    np.savez(tmp_path / "c.npz", x=np.zeros((1, 2, 8, 8), np.float32))
    models = [str(model)] + [str(second) for e in extra if e == "SECOND"]
    extra = [str(tmp_path / e) if e == "c.npz" else e for e in extra if e != "SECOND"]
    code = main([*models, "-o", str(tmp_path / "out"), "--keep-fp32", "conv_cancel", *extra])
    err = capsys.readouterr().err
    assert code == 2 and words in err, err
    assert not (tmp_path / "out").exists()


def test_auto_skips_a_layer_the_converter_refuses_to_cut_around(model, monkeypatch):
    """A layer whose keeping the conversion refuses is recorded with why and skipped; the next
    candidate is tried (the refusal is simulated: such cuts are rare in real models)."""
    import mrvl_convert.tune.keep_fp32 as keep_fp32
    from mrvl_convert.errors import ShapeError

    real = keep_fp32.convert_with

    def refusing(source, out, options, *args):
        if "conv_cancel" in options.keep_fp32:
            raise ShapeError("is a stage boundary without a static shape", tensor="c")
        return real(source, out, options, *args)

    monkeypatch.setattr(keep_fp32, "convert_with", refusing)
    result = convert_keep_fp32(model, None, "auto", max_rounds=2)
    assert "static shape" in result.rounds[0]["refused"] and "verify" not in result.rounds[0]
    # conv_tail, tried next, is measured; it cannot fix conv_cancel's weights, so it is undone
    # (tune/keep_fp32_result.py) and nothing is kept
    assert result.rounds[1]["nodes"] == ["conv_tail"] and "undone" in result.rounds[1]
    assert result.rounds[1]["verify"]["passed"] is False and result.kept == []
    assert result.after == result.before


def test_cli_uses_the_verify_inputs(model, tmp_path, capsys):
    from mrvl_convert.cli.convert import main

    x = np.random.default_rng(5).standard_normal((3, 2, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code = main([str(model), "-o", str(tmp_path / "out"), "--keep-fp32", "conv_cancel",
                 "--verify", "--verify-inputs", str(tmp_path / "in.npz")])
    assert code == 0, capsys.readouterr()
    measured = json.loads((tmp_path / "out" / "m" / "report.json").read_text()
                          )["keep_fp32"]["measured"]
    assert "FAIL over 3 samples: 3 from --verify-inputs" in measured["before"]["line"]
    assert "PASS over 3 samples: 3 from --verify-inputs" in measured["after"]["line"]
