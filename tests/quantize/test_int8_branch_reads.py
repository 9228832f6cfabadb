"""An If whose branches read tensors of the main graph by name (PyTorch's Silero VAD export:
its decoder's second If reads the first If's output and an initializer only inside its
branches). onnxruntime's quantizer sorted that If before the first one, and
``QdqGraph.commit`` (``float_pairs.py``) then dropped the first If and the initializer as
unread: silero_vad_half with ``--quantize int8`` failed onnx's checker. Now the QDQ model keeps
them, in order (``quantize/scope_order.py``, ``core/scopes.py``), and converts."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.core.scopes import outer_reads
from mrvl_convert.frontend.qdq_graph import QdqGraph
from mrvl_convert.quantize.scope_order import ordered_for_branches
from support.scout_int8 import int8_artifact

SHAPE = [1, 8]


def _value(name: str, shape=None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _branch(name: str, nodes, output: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [_value(output, SHAPE)])


def _two_ifs(first_if_first: bool = True) -> onnx.ModelProto:
    """x -> If_a(len == 8: Relu(x) | Neg(x)) = a; If_b(same: a * w_b | a) = b, reading a and
    the initializer w_b only inside its branches; y = MatMul(b, w)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([8], np.int64), "eight"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.full(SHAPE, 0.5, np.float32), "w_b"),
             numpy_helper.from_array((rng.standard_normal((8, 4)) * 0.4).astype(np.float32), "w")]
    if_a = helper.make_node(
        "If", ["cond"], ["a"], name="if_a",
        then_branch=_branch("a_then", [helper.make_node("Relu", ["x"], ["a_t"])], "a_t"),
        else_branch=_branch("a_else", [helper.make_node("Neg", ["x"], ["a_e"])], "a_e"))
    if_b = helper.make_node(
        "If", ["cond"], ["b"], name="if_b",
        then_branch=_branch("b_then", [helper.make_node("Mul", ["a", "w_b"], ["b_t"])], "b_t"),
        else_branch=_branch("b_else", [helper.make_node("Identity", ["a"], ["b_e"])], "b_e"))
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one"], ["n"], name="gather"),
             helper.make_node("Equal", ["n", "eight"], ["eq"], name="equal"),
             helper.make_node("Squeeze", ["eq"], ["cond"], name="squeeze"),
             *([if_a, if_b] if first_if_first else [if_b, if_a]),
             helper.make_node("MatMul", ["b", "w"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "two_ifs", [_value("x", SHAPE)], [_value("y", [1, 4])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_outer_reads_name_what_a_branch_takes_from_outside():
    if_b = next(n for n in _two_ifs().graph.node if n.name == "if_b")
    branches = {a.name: a.g for a in if_b.attribute}
    assert outer_reads(branches["then_branch"]) == {"a", "w_b"}
    assert outer_reads(branches["else_branch"]) == {"a"}


def test_misordered_ifs_are_put_in_order():
    model = _two_ifs(first_if_first=False)
    assert ordered_for_branches(model)
    names = [n.name for n in model.graph.node]
    assert names.index("if_a") < names.index("if_b")
    assert names == ["shape", "gather", "equal", "squeeze", "if_a", "if_b", "fc"]  # stable
    onnx.checker.check_model(model)
    assert not ordered_for_branches(model)  # in order already: unchanged


def test_commit_keeps_what_only_a_branch_reads():
    model = _two_ifs()
    QdqGraph(model).commit()
    assert [n.name for n in model.graph.node] == [n.name for n in _two_ifs().graph.node]
    assert "w_b" in {t.name for t in model.graph.initializer}


def test_int8_model_with_branch_reads_converts(tmp_path: Path):
    rng = np.random.default_rng(1)
    result = int8_artifact(_two_ifs(), tmp_path,
                           {"x": rng.standard_normal((8, 8)).astype(np.float32)})
    qdq = onnx.load(result.out_dir / result.manifest["quantization"]["file"])
    onnx.checker.check_model(qdq)
    assert {"if_a", "if_b"} <= {n.name for n in qdq.graph.node}
    assert result.report["precision"]["shares"]["int8"] == 1.0
