"""Calibration uses exactly the arrays named after the model's inputs (issue 30): an array named
after no input (``labels``) is not used and is named in a warning (never used or skipped
silently), which the manifest records and mrvl-convert prints; the inputs' sample counts agree;
the count of samples used is the one reported, with the reason when it is fewer."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mrvl_convert.errors import CalibrationWarning, InputFeedError
from mrvl_convert.quantize.calibration import calibration_feeds
from mrvl_convert.quantize.recipe import load_calibration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_cnn"
MODEL = EXAMPLE / "mnist_cnn.onnx"


def two_inputs(batch: int = 1) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, 3, 4, 4]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3, 4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def images(count: int) -> np.ndarray:
    return np.random.default_rng(0).random((count, 1, 28, 28), dtype=np.float32)


def test_an_extra_array_in_the_npz_is_named_in_a_warning_and_not_used(tmp_path):
    np.savez(tmp_path / "cal.npz", input=images(4), labels=np.arange(4, dtype=np.float32))
    with pytest.warns(CalibrationWarning) as said:
        got = load_calibration(tmp_path / "cal.npz", MODEL)
    assert list(got) == ["input"] and np.array_equal(got["input"], images(4))
    (text,) = [str(w.message) for w in said]
    assert "['labels']" in text and "not used" in text and "'input' for input 'input'" in text


def test_the_only_float_array_under_another_name_is_used_and_the_rest_named(tmp_path):
    """The project's own heldout.npz: ``images`` (float) beside ``labels`` (int64) for input
    ``input``. The images are used; the warning says so and names the labels."""
    with pytest.warns(CalibrationWarning, match=r"\['labels'\].*'images' for input 'input'"):
        got = load_calibration(EXAMPLE / "heldout.npz", MODEL)
    assert got["input"].shape[1:] == (1, 28, 28)


def test_an_npz_naming_no_input_among_several_floats_is_refused(tmp_path):
    np.savez(tmp_path / "cal.npz", a=images(2), b=images(2))
    with pytest.raises(InputFeedError, match="needs an array per model input"):
        load_calibration(tmp_path / "cal.npz", MODEL)


def test_an_exact_npz_warns_of_nothing(tmp_path):
    np.savez(tmp_path / "cal.npz", input=images(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        load_calibration(tmp_path / "cal.npz", MODEL)


def test_a_mapping_with_a_key_named_after_no_input_is_warned_of():
    zeros = np.zeros((2, 3, 4, 4), np.float32)
    with pytest.warns(CalibrationWarning, match=r"\['labels'\] named after no model input"):
        calibration_feeds(two_inputs(), {"a": zeros, "b": zeros, "labels": np.zeros(2)},
                          "m.onnx")


def test_inputs_with_differing_sample_counts_are_refused():
    with pytest.raises(InputFeedError, match="sample counts differ"):
        calibration_feeds(two_inputs(), {"a": np.zeros((5, 3, 4, 4), np.float32),
                                         "b": np.zeros((4, 3, 4, 4), np.float32)}, "m.onnx")


@pytest.mark.parametrize("batch, given, used, feeds", [(1, 5, 5, 5), (2, 5, 4, 2),
                                                       (3, 64, 63, 21)])
def test_the_reader_counts_the_samples_it_hands_out(batch, given, used, feeds):
    zeros = np.zeros((given, 3, 4, 4), np.float32)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", CalibrationWarning)
        reader = calibration_feeds(two_inputs(batch), {"a": zeros, "b": zeros + 1}, "m.onnx")
    handed = list(iter(reader.get_next, None))
    assert (reader.samples_given, reader.samples_used, len(handed)) == (given, used, feeds)
    assert all(f["a"].shape[0] == batch and np.all(f["b"] == 1) for f in handed)
    texts = [str(w.message) for w in said]
    assert texts == ([] if used == given else
                     [f"calibration data of m.onnx: {used} of the {given} samples used: the "
                      f"model takes batches of {batch}, and only whole batches are fed"])


@pytest.mark.parametrize("extra", [[], ["--keep-fp16", "auto"]])
def test_mrvl_convert_prints_the_warning_once_and_the_manifest_records_it(tmp_path, capsys,
                                                                           extra):
    """Once per model, also when --keep-fp16 auto reads the calibration in this process."""
    from mrvl_convert.cli.convert import main

    np.savez(tmp_path / "cal.npz", input=images(8), labels=np.arange(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)  # a Python warning would be a second
        code = main([str(MODEL), "-o", str(tmp_path / "out"), "--quantize", "int8",
                     "--calibration", str(tmp_path / "cal.npz"), "--quiet", *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = [line for line in err.splitlines() if "labels" in line]
    assert len(lines) == 1 and f"warning: model {MODEL}: calibration data" in lines[0]
    manifest = json.loads((tmp_path / "out" / "mnist_cnn" / "manifest.json").read_text())
    record = manifest["quantization"]["calibration"]
    # 2 of the 8 held out of calibration for verify (core/samples.py calibration_split)
    assert (record["samples"], record["given"], record["held_out"]) == (6, 8, 2)
    assert len(record["warnings"]) == 1 and "['labels']" in record["warnings"][0]
