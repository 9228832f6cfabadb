"""An audio model as Silero-style exporters write it (tests/support/corpus_audio.py): a Conv
front end, an ``If`` on the scalar sample-rate input ``sr``, the recurrent state as an input and
an output (``stateN``, whose shape shape inference cannot tell).

With ``sr`` pinned (``values={"sr": 16000}``, ``--input-value sr=16000``) the If becomes its
16 kHz branch and the whole model is one Mrvl subgraph; without, the If stays on CPU with its
reason and the model converts all the same (``stateN``'s shape from the runs of each branch,
``frontend/shapes.py``). Both artifacts are compared with onnxruntime on the original. Before,
the conversion failed: "tensor 'stateN': ... onnxruntime cannot compute it on zeros of the input
shapes".
"""
from __future__ import annotations

import json

import onnx
import pytest

import mrvl_convert
from mrvl_convert.cli import main as cli_main
from support import corpus_audio

pytestmark = pytest.mark.system

SAMPLES = 3


def _feeds(sr: int):
    return [corpus_audio.feeds(seed, sr=sr) for seed in range(SAMPLES)]


def test_the_sample_rate_pinned_folds_the_if_and_the_model_is_one_mrvl_subgraph(tmp_path):
    model = corpus_audio.audio_vad()
    result = mrvl_convert.convert(model, tmp_path / "art", shapes=corpus_audio.SHAPES,
                                  values={"sr": 16000})
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert result.manifest["options"]["values"] == {"sr": 16000}
    entry = next(e for e in result.report["nodes"] if e["name"] == "If_sr")
    assert entry["placement"] == "removed" and "sr=16000" in entry["reason"]
    assert {d["stage"] for d in entry["derived"]} == {"audio_vad_mrvl_0"}
    comparison = mrvl_convert.compare(model, tmp_path / "art", _feeds(16000))
    assert comparison.passed, comparison
    # Random feeds give the pinned input its value (the artifact computes the 16 kHz model).
    assert mrvl_convert.compare(model, tmp_path / "art", samples=2).passed


def test_without_the_value_the_if_stays_on_cpu_with_its_reason_and_the_model_converts(
        tmp_path):
    model = corpus_audio.audio_vad()
    result = mrvl_convert.convert(model, tmp_path / "art", shapes=corpus_audio.SHAPES)
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds.count("mrvl") == 1, kinds
    entry = next(e for e in result.report["nodes"] if e["name"] == "If_sr")
    assert entry["placement"] == "cpu"
    assert "an If runs on CPU" in entry["canonical"] and "'sr'" in entry["canonical"]
    outputs = {o["name"]: o["shape"] for o in result.manifest["model"]["outputs"]}
    assert outputs["stateN"] == [1, 1, corpus_audio.HIDDEN]
    for sr in (16000, 8000):  # the If runs on CPU: both rates
        comparison = mrvl_convert.compare(model, tmp_path / "art", _feeds(sr))
        assert comparison.passed, (sr, comparison)


def test_the_command_line_pins_the_value(tmp_path):
    path = tmp_path / "audio_vad.onnx"
    onnx.save(corpus_audio.audio_vad(), str(path))
    code = cli_main([str(path), "-o", str(tmp_path / "out"), "--input-shape", "input:1,512",
                     "--input-shape", "state:1,1,64", "--input-value", "sr=16000", "-q"])
    assert code == 0
    manifest = json.loads((tmp_path / "out" / "audio_vad" / "manifest.json").read_text())
    assert manifest["options"]["values"] == {"sr": 16000}
    assert [s["kind"] for s in manifest["stages"]] == ["mrvl"]


@pytest.mark.parametrize("flag,words", [
    ("sr=fast", ["--input-value 'sr=fast'", "'fast' is not a number"]),
    ("sr", ["expected NAME=V"]),
])
def test_a_malformed_input_value_is_a_usage_error(tmp_path, capsys, flag, words):
    path = tmp_path / "audio_vad.onnx"
    onnx.save(corpus_audio.audio_vad(), str(path))
    assert cli_main([str(path), "-o", str(tmp_path / "out"), "--input-value", flag]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert "Traceback" not in err


def test_a_value_the_model_cannot_take_is_one_line_naming_the_input(tmp_path, capsys):
    path = tmp_path / "audio_vad.onnx"
    onnx.save(corpus_audio.audio_vad(), str(path))
    code = cli_main([str(path), "-o", str(tmp_path / "out"), "--input-shape", "input:1,512",
                     "--input-shape", "state:1,1,64", "--input-value", "sr=16000.5", "-q"])
    assert code == 1
    err = capsys.readouterr().err
    assert "tensor 'sr'" in err and "int64" in err and "Traceback" not in err
