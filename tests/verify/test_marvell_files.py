"""Marvell's -input.json / -output.json: round trip and hostile files."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mrvl_convert.errors import InputFeedError
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.marvell_files import (read_input_json, read_output_json,
                                               write_output_json)

SPECS = [TensorSpec("x", (1, 2, 2, 3), "float32"), TensorSpec("y", (1, 4), "float32")]


def _write(tmp_path, doc, name="in.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_inputs_in_marvells_layout_read_back_to_the_same_arrays(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {s.name: rng.standard_normal(s.shape).astype(np.float32) for s in SPECS}
    path = _write(tmp_path, {"inputs": [arrays[s.name].ravel().tolist() for s in SPECS]})
    feed = read_input_json(path, SPECS)
    for spec in SPECS:
        assert feed[spec.name].dtype == np.float32
        np.testing.assert_array_equal(feed[spec.name], arrays[spec.name])


def test_outputs_written_read_back(tmp_path):
    outputs = {"x": np.arange(12, dtype=np.float32).reshape(1, 2, 2, 3) / 7,
               "y": np.array([[1.5, -2.0, 0.0, 3.25]], dtype=np.float32)}
    path = tmp_path / "out.json"
    write_output_json(path, outputs)
    doc = json.loads(path.read_text())
    assert list(doc) == ["x", "y"] and len(doc["y"]) == 1 and len(doc["y"][0]) == 4
    back = read_output_json(path, SPECS)
    for name, value in outputs.items():
        np.testing.assert_array_equal(back[name], value)


def test_bin2json_single_outputs_key_is_the_only_output(tmp_path):
    path = _write(tmp_path, {"outputs": [[1.0, 2.0, 3.0, 4.0]]})
    back = read_output_json(path, SPECS[1:])
    np.testing.assert_array_equal(back["y"], [[1.0, 2.0, 3.0, 4.0]])


@pytest.mark.parametrize("doc, match", [
    ({"inputs": [[0.0] * 12, [0.0] * 5]}, "more than 4 values"),
    ({"inputs": [[0.0] * 12, [0.0] * 3]}, "3 values, shape"),
    ({"inputs": [[0.0] * 12]}, "1 input lists"),
    ({"inputs": [[0.0] * 12, ["a", 0.0, 0.0, 0.0]]}, "str, not a number"),
    ({"inputs": [[0.0] * 12, [True, 0.0, 0.0, 0.0]]}, "bool, not a number"),
    ({"inputs": [[0.0] * 12, [None, 0.0, 0.0, 0.0]]}, "NoneType"),
    ({"input": []}, "\"inputs\" list"),
    ([1, 2], "\"inputs\" list"),
])
def test_hostile_input_files_are_named_errors(tmp_path, doc, match):
    with pytest.raises(InputFeedError, match=match):
        read_input_json(_write(tmp_path, doc), SPECS)


@pytest.mark.parametrize("text, match", [
    ('{"inputs": [[NaN], [0, 0, 0, 0]]}', "NaN is not JSON"),
    ('{"inputs": [[1e999], [0, 0, 0, 0]]}', "not finite"),
    ('{"inputs": ' + "[" * 200 + "]" * 200 + "}", "nests deeper"),
    ('{"inputs": [[' + "1" * 40 + "]]}", "digits"),
    ('{"inputs": [[' + "0," * 20000 + "0], []]}", "bytes, more than"),
    ('{"inputs": [[0', "not readable JSON"),
])
def test_hostile_json_text_is_refused_before_allocating(tmp_path, text, match):
    path = _write(tmp_path, text)
    with pytest.raises(InputFeedError, match=match) as info:
        read_input_json(path, SPECS)
    assert str(path) in str(info.value)


def test_an_output_the_model_does_not_have_is_named(tmp_path):
    path = _write(tmp_path, {"z": [[1.0]]})
    with pytest.raises(InputFeedError, match="'z' is not an output"):
        read_output_json(path, SPECS)


def test_public_names_reach_the_file_functions(tmp_path):
    import mrvl_convert
    assert mrvl_convert.write_marvell_outputs is write_output_json
    assert mrvl_convert.read_marvell_inputs is read_input_json
    assert {"read_marvell_inputs", "write_marvell_outputs"} <= set(mrvl_convert.__all__)


def test_written_and_read_files_follow_the_schemas(tmp_path):
    from pathlib import Path

    import jsonschema
    schemas = Path(__file__).parents[2] / "schemas"
    out = tmp_path / "o.json"
    write_output_json(out, {"y": np.ones((1, 4), np.float32)})
    for kind, doc in (("output", json.loads(out.read_text())),
                      ("input", {"inputs": [[0.0] * 12, [1.0] * 4]})):
        schema = json.loads((schemas / f"marvell-{kind}.schema.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(doc)
    read_input_json(_write(tmp_path, {"inputs": [[0.0] * 12, [1.0] * 4]}), SPECS)
