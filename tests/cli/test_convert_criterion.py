"""mrvl-convert --verify --criterion marvell: the criterion reaches the batch worker's verdict."""
from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.batch import VerifyOptions, convert_many
from mrvl_convert.cli.convert import main


def _model(path):
    w = numpy_helper.from_array(
        np.random.default_rng(4).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_criterion_needs_verify(tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    assert main([str(model), "-o", str(tmp_path / "out"), "--criterion", "marvell"]) == 2
    assert "--criterion needs --verify" in capsys.readouterr().err


def test_verify_with_marvell_criterion_passes(tmp_path):
    model = _model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert main([str(model), "-o", str(out), "-q", "--verify", "--criterion", "marvell"]) == 0
    assert json.loads((out / "summary.json").read_text())["models"][0]["verified"] is True


def test_criterion_is_applied_by_the_worker(tmp_path, monkeypatch):
    import mrvl_convert.verify.compare as compare_module
    seen = []
    real = compare_module.compare

    def spy(*args, **kwargs):
        seen.append(kwargs.get("criterion"))
        return real(*args, **kwargs)

    monkeypatch.setattr(compare_module, "compare", spy)
    model = _model(tmp_path / "m.onnx")
    convert_many([model], tmp_path / "out", verify=VerifyOptions(criterion="marvell"))
    assert seen == ["marvell"]
