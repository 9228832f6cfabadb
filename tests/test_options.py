"""``mrvl_convert.options.ConvertOptions``: checked once as it is built (before any model is
read), frozen, and written to the manifest as ``convert`` always wrote its keywords."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.convert import convert_with
from mrvl_convert.errors import MrvlConvertError, OptionError
from mrvl_convert.options import ConvertOptions


def _cnn() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3]),
             helper.make_node("Sigmoid", ["c"], ["y"], name="act")]
    graph = helper.make_graph(nodes, "cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("keywords, error, words", [
    ({"policy": "fastest"}, OptionError, "unknown policy 'fastest'"),
    ({"max_subgraphs": -1}, OptionError, "max_subgraphs must be an integer >= 0"),
    ({"min_compute_layers": True}, OptionError, "min_compute_layers must be an integer >= 0"),
    ({"deny": "Conv"}, MrvlConvertError, "deny must be a list of op types or node names"),
    ({"deny": ["Conv", ""]}, MrvlConvertError, "deny must be a list of op types or node names"),
    ({"quantize": "int8"}, OptionError, "quantize must be a Quantization"),
])
def test_a_bad_option_is_refused_before_the_model_is_read(tmp_path: Path, keywords, error,
                                                          words) -> None:
    with pytest.raises(error, match=words):
        ConvertOptions(**keywords)
    with pytest.raises(error, match=words):
        mrvl_convert.convert(tmp_path / "no_such_model.onnx", tmp_path / "out", **keywords)
    assert not (tmp_path / "out").exists()


def test_options_are_frozen_and_copied_from_the_caller() -> None:
    deny, shapes = ["Sigmoid"], {"x": [1, 3, 8, 8]}
    options = ConvertOptions(rules="extra.yaml", deny=deny, shapes=shapes)
    deny.append("Conv")
    shapes["y"] = [1]
    assert (options.rules, options.deny, options.shapes) == (("extra.yaml",), ("Sigmoid",),
                                                             {"x": [1, 3, 8, 8]})
    assert ConvertOptions(rules=None).rules == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.policy = "single"  # type: ignore[misc]


def test_the_manifest_options_name_only_what_differs_from_the_defaults() -> None:
    plain = ConvertOptions().manifest_entry({"x": (1, 3, 8, 8)})
    assert list(plain) == ["policy", "shapes", "rules", "layer_set"]
    assert plain["shapes"] == {"x": [1, 3, 8, 8]}
    assert all(r["name"].startswith("builtin") for r in plain["rules"])
    given = ConvertOptions(deny=["Sigmoid", "Conv", "Sigmoid"], max_subgraphs=0,
                           min_compute_layers=2).manifest_entry({})
    assert given["deny"] == ["Conv", "Sigmoid"]  # sorted, once each
    assert (given["max_subgraphs"], given["min_compute_layers"]) == (0, 2)


def test_convert_and_convert_with_write_the_same_artifact(tmp_path: Path) -> None:
    keywords = {"policy": "single", "deny": ["Sigmoid"], "min_compute_layers": 0,
                "name": "net"}
    by_keywords = mrvl_convert.convert(_cnn(), tmp_path / "a", **keywords)
    with_options = convert_with(_cnn(), tmp_path / "b", ConvertOptions(**keywords))
    assert by_keywords.manifest == with_options.manifest
    assert by_keywords.manifest["options"]["deny"] == ["Sigmoid"]
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["summary"]["cpu_nodes"] >= 1  # the denied Sigmoid
