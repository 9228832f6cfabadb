"""Issue 43 finding 9: an If folded by a pinned input (``--input-value``) whose branch output is
also read inside the branch (then: r = Relu(x) is output 0 and Mul(r, 2) output 1) converts to
an artifact that opens and computes what onnxruntime computes for the model; so does a branch
that hands one tensor out twice."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import run_ort


def _branch(name: str, nodes: List[onnx.NodeProto], outputs: List[str]) -> onnx.GraphProto:
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    return helper.make_graph(nodes, name, [], outs)


def _model(twice: bool = False) -> onnx.ModelProto:
    """Conv -> If(mode == 1) -> Conv on each output. then: (r, Mul(r, 2)) with r = Relu(c)
    read inside the branch too (or (r, r) with ``twice``); else: (c, Neg(c))."""
    rng = np.random.default_rng(0)
    then_nodes = [helper.make_node("Relu", ["c"], ["r"], name="relu")]
    if twice:
        then = _branch("then", then_nodes, ["r", "r"])
    else:
        then_nodes.append(helper.make_node("Mul", ["r", "two"], ["r2"], name="mul"))
        then = _branch("then", then_nodes, ["r", "r2"])
    other = _branch("else", [helper.make_node("Identity", ["c"], ["c_id"], name="copy"),
                             helper.make_node("Neg", ["c"], ["c_neg"], name="neg")],
                    ["c_id", "c_neg"])
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c"], name="conv0", pads=[1] * 4),
             helper.make_node("Equal", ["mode", "mode_one"], ["is_one"], name="equal"),
             helper.make_node("If", ["is_one"], ["a", "b"], name="if_mode",
                              then_branch=then, else_branch=other),
             helper.make_node("Conv", ["a", "w1"], ["y1"], name="conv1", pads=[1] * 4),
             helper.make_node("Conv", ["b", "w2"], ["y2"], name="conv2", pads=[1] * 4)]
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3)
                                     .astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.3)
                                     .astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.3)
                                     .astype(np.float32), "w2"),
             numpy_helper.from_array(np.int64(1), "mode_one"),
             numpy_helper.from_array(np.float32(2), "two")]
    graph = helper.make_graph(
        nodes, "branch_reads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("mode", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 4, 8, 8]),
         helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _feed(mode: int) -> Dict[str, np.ndarray]:
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    return {"x": x, "mode": np.array(mode, np.int64)}


def _reference(model: onnx.ModelProto, feed: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """What the model computes, run by onnxruntime with the If written out by hand as the
    branch the pinned mode chooses (onnxruntime itself, optimized or not, returns a wrong first
    output for an If that hands one branch tensor out twice)."""
    graph = model.graph
    mode = int(feed["mode"])
    [branch] = [a.g for a in graph.node[2].attribute
                if a.name == ("then_branch" if mode == 1 else "else_branch")]
    inner = list(branch.node) + [
        helper.make_node("Identity", [out.name], [outer], name=f"bind_{outer}")
        for out, outer in zip(branch.output, ("a", "b"))]
    unrolled = helper.make_graph([graph.node[0], *inner, graph.node[3], graph.node[4]],
                                 "unrolled", [graph.input[0]], list(graph.output),
                                 list(graph.initializer))
    written = helper.make_model(unrolled, opset_imports=list(model.opset_import), ir_version=8)
    return run_ort(written, {"x": feed["x"]})


@pytest.mark.parametrize("twice", [False, True])
@pytest.mark.parametrize("mode", [1, 0])
def test_the_folded_graph_computes_what_the_model_does(mode, twice) -> None:
    import onnx_graphsurgeon as gs
    model = _model(twice)
    canonical = canonicalize(load_model(model, values={"mode": mode}))
    assert "If" not in {n.op for n in canonical.graph.nodes}
    folded = gs.export_onnx(canonical.graph, do_type_check=False)
    folded.ir_version = 8
    got, want = run_ort(folded, _feed(mode)), _reference(model, _feed(mode))
    for name in ("y1", "y2"):
        assert np.array_equal(got[name], want[name]), name


@pytest.mark.parametrize("twice", [False, True])
def test_the_artifact_opens_and_runs_like_the_model(tmp_path, twice) -> None:
    model = _model(twice)
    mrvl_convert.convert(model, tmp_path / "art", values={"mode": 1})
    session = mrvl_convert.HybridSession(tmp_path / "art")  # opened: every tensor produced
    got = session.run(None, _feed(1))
    want = _reference(model, _feed(1))
    for value, name in zip(got, ("y1", "y2")):
        assert np.allclose(value, want[name], rtol=2e-2, atol=2e-2), name
