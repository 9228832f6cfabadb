"""mrvl-verify with Marvell's files: --inputs -input.json, --write-outputs, --against and
--criterion marvell, on a small Conv model converted here."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert import compare, convert
from mrvl_convert.cli.verify import main
from mrvl_convert.verify.marvell_files import write_output_json


def _model(path):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Add", ["r", "r"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("marvell")
    model = _model(root / "m.onnx")
    result = convert(model, root / "out")
    inputs = root / "m-input.json"
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    inputs.write_text(json.dumps({"inputs": [x.ravel().tolist()]}))
    return model, result.out_dir, inputs, root


def test_written_outputs_compared_back_pass(converted, capsys):
    model, art, inputs, root = converted
    out = root / "sim-output.json"
    code = main([str(model), str(art), "--inputs", str(inputs), "--write-outputs", str(out)])
    assert code == 0, capsys.readouterr()
    doc = json.loads(out.read_text())
    assert list(doc) == ["y"] and len(doc["y"][0]) == 4 * 8 * 8
    for criterion in ("ours", "marvell"):
        assert main([str(model), str(art), "--inputs", str(inputs), "--against", str(out),
                     "--criterion", criterion]) == 0


def test_one_element_off_by_10_percent_fails_naming_it(converted, capsys):
    model, art, inputs, root = converted
    out = root / "sim-output.json"
    main([str(model), str(art), "--inputs", str(inputs), "--write-outputs", str(out)])
    values = np.array(json.loads(out.read_text())["y"][0])
    k = int(np.argmax(np.abs(values)))
    values[k] *= 1.1
    device = root / "device-output.json"
    write_output_json(device, {"y": values})
    capsys.readouterr()
    code = main([str(model), str(art), "--inputs", str(inputs), "--against", str(device),
                 "--criterion", "marvell"])
    text = capsys.readouterr().out
    assert code == 3
    assert f"flat index {k}" in text and "y" in text
    result = compare(model, art, against=device, criterion="marvell",
                     inputs={"x": json_feed(inputs)})
    assert not result.passed


def json_feed(path):
    return np.array(json.loads(path.read_text())["inputs"][0],
                    dtype=np.float32).reshape(1, 3, 8, 8)


def test_verify_against_onnxruntime_with_marvell_criterion(converted):
    model, art, inputs, _ = converted
    result = compare(model, art, {"x": json_feed(inputs)}, criterion="marvell")
    assert result.passed
    assert "criterion marvell (fp16)" in result.judged_rows[0].note


@pytest.mark.parametrize("text", [
    '{"inputs": [[NaN]]}', '{"inputs": [[1, 2]]}', '{"inputs": [["a"]]}',
    '{"inputs": ' + "[" * 500 + "]" * 500 + "}", '{"inputs": [[' + "9" * 30 + "]]}"])
def test_hostile_input_json_is_one_line_exit_2(converted, tmp_path, capsys, text):
    model, art, _, _ = converted
    bad = tmp_path / "bad-input.json"
    bad.write_text(text)
    capsys.readouterr()
    assert main([str(model), str(art), "--inputs", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err
