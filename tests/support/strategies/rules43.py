"""Hypothesis strategy of a form issue 43 fixed (finding 9): an If, decided by a pinned input,
whose branches hand out tensors that other branch nodes also read, or one tensor twice."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

_UNARY = ("Relu", "Neg", "Abs", "Sigmoid", "Identity")


@dataclass(frozen=True)
class BranchModel:
    model: onnx.ModelProto
    mode: int            # the pinned value of input "mode": 1 takes the then branch
    outputs: Tuple[str, ...]


@st.composite
def _branch(draw, name: str, source: str, outs: int) -> onnx.GraphProto:
    """A chain of unary ops on ``source``; ``outs`` outputs drawn among its tensors (any may be
    read further down the chain too, or drawn twice)."""
    length = draw(st.integers(1, 4), label=f"{name} length")
    tensors, nodes = [source], []
    for k in range(length):
        op = draw(st.sampled_from(_UNARY), label=f"{name} op")
        nodes.append(helper.make_node(op, [tensors[-1]], [f"{name}_{k}"], name=f"{name}_n{k}"))
        tensors.append(f"{name}_{k}")
    picks = draw(st.lists(st.sampled_from(tensors[1:]), min_size=outs, max_size=outs),
                 label=f"{name} outputs")
    return helper.make_graph(nodes, name, [], [
        helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in picks])


@st.composite
def branch_models(draw) -> BranchModel:
    """Conv -> If(mode == 1) with two or three outputs -> a Conv reading each."""
    outs = draw(st.integers(2, 3), label="If outputs")
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16), label="seed"))
    names = [f"o{k}" for k in range(outs)]
    nodes: List[onnx.NodeProto] = [
        helper.make_node("Conv", ["x", "w0"], ["c"], name="conv0", pads=[1] * 4),
        helper.make_node("Equal", ["mode", "one"], ["is_one"], name="equal"),
        helper.make_node("If", ["is_one"], names, name="if_mode",
                         then_branch=draw(_branch("then", "c", outs)),
                         else_branch=draw(_branch("else", "c", outs)))]
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3)
                                     .astype(np.float32), "w0"),
             numpy_helper.from_array(np.int64(1), "one")]
    for k, name in enumerate(names):
        inits.append(numpy_helper.from_array((rng.standard_normal((4, 4, 1, 1)) * 0.3)
                                             .astype(np.float32), f"w{k + 1}"))
        nodes.append(helper.make_node("Conv", [name, f"w{k + 1}"], [f"y{k}"], name=f"conv{k + 1}"))
    graph = helper.make_graph(
        nodes, "branch_fuzz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("mode", TensorProto.INT64, [])],
        [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [1, 4, 8, 8])
         for k in range(outs)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    onnx.checker.check_model(model)
    return BranchModel(model, draw(st.sampled_from([0, 1]), label="mode"),
                       tuple(f"y{k}" for k in range(outs)))


def unrolled(case: BranchModel) -> onnx.ModelProto:
    """The model with its If written out as the branch ``case.mode`` takes, each branch output
    bound by an Identity: the reference (onnxruntime mis-runs an If handing one tensor out
    twice)."""
    graph = case.model.graph
    [branch] = [a.g for a in graph.node[2].attribute
                if a.name == ("then_branch" if case.mode == 1 else "else_branch")]
    bound = [helper.make_node("Identity", [out.name], [outer], name=f"bind_{outer}")
             for out, outer in zip(branch.output, graph.node[2].output)]
    nodes = [graph.node[0], *branch.node, *bound, *graph.node[3:]]
    return helper.make_model(
        helper.make_graph(nodes, "unrolled", [graph.input[0]], list(graph.output),
                          list(graph.initializer)),
        opset_imports=list(case.model.opset_import), ir_version=8)
