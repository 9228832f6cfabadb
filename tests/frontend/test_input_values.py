"""frontend/input_values.py and branches.py: an input pinned to a value for the conversion, an If
whose condition is constant replaced by its branch (every output rebound), an If left in the
graph with the reason it stays on CPU.

Each canonical graph is run on onnxruntime against the original model with the pinned value fed:
the rewrite is exact, so the outputs are bit for bit the same.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.errors import OptionError
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from mrvl_convert.options import ConvertOptions
from support.models import run_ort


def _graph(name: str, nodes: List[onnx.NodeProto], outputs: Sequence[str],
           inits: Sequence[onnx.TensorProto] = ()) -> onnx.GraphProto:
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    return helper.make_graph(nodes, name, [], outs, list(inits))


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def mode_model(nested: bool = False) -> onnx.ModelProto:
    """``If(mode == 1)`` with two outputs: then (y = relu(x) * 2, state = x + 1), else
    (y = x, an Identity; state = x - 1). ``nested``: the then
    branch's ``state`` comes from an inner If on ``mode > 0``."""
    inner_then = _graph("inner_then", [helper.make_node("Add", ["x", "one"], ["s_in"],
                                                        name="add_in")], ["s_in"])
    inner_else = _graph("inner_else", [helper.make_node("Neg", ["x"], ["s_neg"],
                                                        name="neg_in")], ["s_neg"])
    then_nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                  helper.make_node("Mul", ["r", "two"], ["y_then"], name="mul")]
    if nested:
        then_nodes += [helper.make_node("Greater", ["mode", "zero"], ["positive"], name="gt"),
                       helper.make_node("If", ["positive"], ["s_then"], name="inner_if",
                                        then_branch=inner_then, else_branch=inner_else)]
    else:
        then_nodes.append(helper.make_node("Add", ["x", "one"], ["s_then"], name="add"))
    then_branch = _graph("then", then_nodes, ["y_then", "s_then"])
    else_branch = _graph("else", [helper.make_node("Identity", ["x"], ["y_else"], name="copy"),
                                  helper.make_node("Sub", ["x", "one"], ["s_else"],
                                                   name="sub")], ["y_else", "s_else"])
    nodes = [helper.make_node("Equal", ["mode", "mode_one"], ["is_one"], name="equal"),
             helper.make_node("If", ["is_one"], ["y", "state"], name="if_mode",
                              then_branch=then_branch, else_branch=else_branch)]
    graph = helper.make_graph(
        nodes, "mode_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("mode", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, 4])],
        [_const("mode_one", np.int64(1)), _const("one", np.float32(1)),
         _const("two", np.float32(2)), _const("zero", np.int64(0))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _feed(mode: int) -> Dict[str, np.ndarray]:
    x = np.random.default_rng(mode + 5).standard_normal((1, 4)).astype(np.float32)
    return {"x": x, "mode": np.array(mode, np.int64)}


def _exported(graph: gs.Graph) -> onnx.ModelProto:
    model = gs.export_onnx(graph, do_type_check=False)
    model.ir_version = 8
    return model


@pytest.mark.parametrize("mode,nested", [(1, False), (0, False), (1, True), (3, True)])
def test_a_pinned_input_folds_the_if_it_decides_with_every_output(mode, nested):
    model = mode_model(nested)
    canonical = canonicalize(load_model(model, values={"mode": mode}))
    assert "If" not in {n.op for n in canonical.graph.nodes}
    assert "sr" not in canonical.removed
    assert "replaced by the branch it chooses" in canonical.removed["if_mode"]
    assert f"mode={mode}" in canonical.removed["if_mode"]
    assert {o for o in canonical.derived.values()} <= {"if_mode"}
    got = run_ort(_exported(canonical.graph), _feed(mode))
    want = run_ort(model, _feed(mode))
    assert set(got) == {"y", "state"}
    for name in ("y", "state"):
        assert np.array_equal(got[name], want[name]), name


def test_an_if_left_in_the_graph_says_why_it_stays_on_cpu():
    canonical = canonicalize(load_model(mode_model()))
    [node] = [n for n in canonical.graph.nodes if n.op == "If"]
    reason = canonical.kept[node.name]
    assert "an If runs on CPU" in reason and "from input(s) 'mode'" in reason
    assert "--input-value" in reason


def test_the_manifest_records_the_pinned_values_and_the_artifact_runs_like_the_model(
        tmp_path):
    model = mode_model()
    result = mrvl_convert.convert(model, tmp_path / "art", values={"mode": 1})
    assert result.manifest["options"]["values"] == {"mode": 1}
    entry = next(e for e in result.report["nodes"] if e["name"] == "if_mode")
    assert entry["placement"] == "removed" and entry["derived"]
    session = mrvl_convert.HybridSession(tmp_path / "art")
    got = session.run(None, _feed(1))
    want = run_ort(model, _feed(1))
    assert all(np.array_equal(g, want[n]) for g, n in zip(got, ("y", "state")))


@pytest.mark.parametrize("values,words", [
    ({"modes": 1}, ["'modes'", "not a graph input", "mode, x"]),
    ({"mode": "16000"}, ["'mode'", "must be a number"]),
    ({"mode": 1.5}, ["'mode'", "int64", "1.5", "whole number"]),
    ({"mode": 1 << 70}, ["'mode'", "int64", "not a value of it"]),
    ({"mode": True}, ["'mode'", "give numbers"]),
    ({"mode": [1, 2]}, ["'mode'", "shape [2]", "shape is []"]),
    ({"x": [[1, 2, 3]]}, ["'x'", "shape [1, 3]", "[1, 4]"]),
    ({"x": [[1e39, 0, 0, 0]]}, ["'x'", "float32", "out of its range"]),
    ({"mode": [[1], [2, 3]]}, ["'mode'", "regular shape"]),
    ({"mode": None}, ["'mode'", "must be a number"]),
])
def test_a_hostile_value_is_an_option_error_naming_the_input(values, words):
    with pytest.raises(OptionError) as raised:
        load_model(mode_model(), values=ConvertOptions(values=values).values)
    assert all(w in str(raised.value) for w in words), str(raised.value)


def test_values_must_be_a_dict():
    with pytest.raises(OptionError, match="values must be a dict"):
        ConvertOptions(values=[("mode", 1)])
    with pytest.raises(OptionError, match="non-empty string"):
        ConvertOptions(values={1: 1})


def test_a_value_is_cast_to_its_input_exactly():
    loaded = load_model(mode_model(), values={"mode": 1.0, "x": [[0.1, 2, 3, 4]]})
    assert loaded.values["mode"].dtype == np.int64 and loaded.values["mode"].shape == ()
    assert loaded.values["x"].dtype == np.float32
    assert loaded.values["x"].tolist() == [[np.float32(0.1).item(), 2.0, 3.0, 4.0]]


def _shape_if_model(else_width: int) -> onnx.ModelProto:
    """``If(mode == 1)``: then ``Relu(x)`` [1, 4], else ``x`` reshaped to [1, 4 / w, w] by a
    target that reads ``mode`` (``w = else_width * (1 + mode)``), which shape inference cannot
    tell. On zeros the else branch runs, on ones the then branch."""
    then_branch = _graph("then", [helper.make_node("Relu", ["x"], ["y_then"], name="relu")],
                         ["y_then"])
    width = [helper.make_node("Add", ["mode", "mode_one"], ["m1"], name="m1"),
             helper.make_node("Mul", ["m1", "w"], ["wide"], name="wide"),
             helper.make_node("Unsqueeze", ["wide", "axes"], ["wide1"], name="wide1"),
             helper.make_node("Concat", ["ones", "wide1"], ["target"], name="target", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y_else"], name="reshape")]
    else_branch = _graph("else", width, ["y_else"])
    nodes = [helper.make_node("Equal", ["mode", "mode_one"], ["is_one"], name="equal"),
             helper.make_node("If", ["is_one"], ["y"], name="if_mode",
                              then_branch=then_branch, else_branch=else_branch)]
    graph = helper.make_graph(
        nodes, "shape_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("mode", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d0", "d1"])],
        [_const("mode_one", np.int64(1)), _const("w", np.int64(else_width)),
         _const("axes", np.array([0], np.int64)), _const("ones", np.array([1, -1], np.int64))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_a_shape_the_branches_disagree_on_is_not_guessed():
    """On zeros the else branch gives [1, 2, 2] (w = 2), on ones the then branch [1, 4]."""
    with pytest.raises(mrvl_convert.errors.ShapeError) as raised:
        canonicalize(load_model(_shape_if_model(2)))
    assert "depends on the input values ([1, 2, 2] for zeros, [1, 4] for ones)" in str(
        raised.value)


def test_the_shape_is_taken_from_the_branch_that_runs(tmp_path):
    """w = 3 does not divide 4: the else branch fails on zeros (so the runs fail), the then
    branch gives [1, 4] on zeros and ones: the artifact's output shape, right whenever the
    model runs (mode == 1)."""
    model = _shape_if_model(3)
    canonical = canonicalize(load_model(model))
    assert canonical.graph.outputs[0].shape == [1, 4]
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert result.manifest["model"]["outputs"][0]["shape"] == [1, 4]
    got = mrvl_convert.HybridSession(tmp_path / "art").run(None, _feed(1))[0]
    assert np.array_equal(got, run_ort(model, _feed(1))["y"])
