"""An input pinned at conversion (``values={"sr": 16000}``, ``--input-value sr=16000``): the
artifact computes the model for that value only, so the session refuses any other value with an
InputFeedError naming the input and both values (before, it returned the 16 kHz branch's
results for an 8 kHz feed, silently). Verification on a user's feeds of another value stops
with that error too, instead of a verdict on results the artifact was never meant to give.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.cli import main as cli_main
from mrvl_convert.cli.verify import main as verify_main
from mrvl_convert.errors import InputFeedError
from mrvl_convert.runtime.session import HybridSession
from support import corpus_audio


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    root = tmp_path_factory.mktemp("pinned")
    model = corpus_audio.audio_vad()
    mrvl_convert.convert(model, root / "art", shapes=corpus_audio.SHAPES, values={"sr": 16000})
    return model, root


def test_another_value_of_a_pinned_input_is_refused_naming_it_and_both_values(pinned):
    _, root = pinned
    session = HybridSession(root / "art")
    with pytest.raises(InputFeedError) as info:
        session.run(None, corpus_audio.feeds(0, sr=8000))
    message = str(info.value)
    assert "'sr'" in message and "16000" in message and "8000" in message, message
    # The other call paths check it too: outputs named, capture, a feed not in the fast form.
    with pytest.raises(InputFeedError, match="8000"):
        session.run(["output"], corpus_audio.feeds(0, sr=8000))
    with pytest.raises(InputFeedError, match="8000"):
        session.run(None, corpus_audio.feeds(0, sr=8000), capture=True)
    loose = {k: v.tolist() for k, v in corpus_audio.feeds(0, sr=8000).items()}
    loose["input"] = np.asarray(loose["input"], np.float32)
    loose["state"] = np.asarray(loose["state"], np.float32)
    loose["sr"] = np.array(8000)
    with pytest.raises(InputFeedError, match="8000"):
        session.run(None, loose)


def test_the_pinned_value_runs_and_matches_the_original(pinned):
    model, root = pinned
    session = HybridSession(root / "art")
    outputs = session.run(None, corpus_audio.feeds(1, sr=16000))
    assert np.isfinite(outputs[0]).all()
    assert mrvl_convert.compare(model, root / "art", corpus_audio.feeds(1, sr=16000)).passed


def test_compare_on_feeds_of_another_value_raises_instead_of_a_verdict(pinned):
    model, root = pinned
    with pytest.raises(InputFeedError, match="'sr'"):
        mrvl_convert.compare(model, root / "art", [corpus_audio.feeds(2, sr=8000)])


def test_mrvl_verify_inputs_of_another_value_is_one_line_and_a_failure(pinned, tmp_path, capsys):
    model, root = pinned
    onnx.save(model, str(tmp_path / "audio_vad.onnx"))
    np.savez(tmp_path / "feeds.npz", **corpus_audio.feeds(3, sr=8000))
    code = verify_main([str(tmp_path / "audio_vad.onnx"), str(root / "art"),
                        "--inputs", str(tmp_path / "feeds.npz")])
    err = capsys.readouterr().err
    assert code != 0
    assert "'sr'" in err and "8000" in err and "Traceback" not in err, err


def test_mrvl_convert_verify_inputs_of_another_value_is_one_line_and_a_failure(tmp_path,
                                                                               capsys):
    path = tmp_path / "audio_vad.onnx"
    onnx.save(corpus_audio.audio_vad(), str(path))
    np.savez(tmp_path / "feeds.npz", **corpus_audio.feeds(4, sr=8000))
    code = cli_main([str(path), "-o", str(tmp_path / "out"), "--input-shape", "input:1,512",
                     "--input-shape", "state:1,1,64", "--input-value", "sr=16000",
                     "--verify", "--verify-inputs", str(tmp_path / "feeds.npz"), "-q"])
    err = capsys.readouterr().err
    assert code != 0
    assert "'sr'" in err and "8000" in err and "Traceback" not in err, err
