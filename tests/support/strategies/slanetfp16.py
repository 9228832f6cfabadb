"""Strategies for the fp16 floor's forms (``verify/floor_folds.py``, ``value_tensors.DECISIONS``):
a Conv (grouped or not, with or without bias, weights as initializers or Constant nodes) and the
BatchNormalization reading it, its output re-centred from an offset; and a backbone whose float
features reach an index slot only through a decision (ArgMax, ArgMin, TopK)."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inits, outputs, constants: bool) -> onnx.ModelProto:
    if constants:  # Paddle's form: every weight a Constant node
        nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in inits] + nodes
        inits = []
    graph = helper.make_graph(nodes, "floor_form",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 4, 6, 6])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@st.composite
def conv_bn_models(draw) -> onnx.ModelProto:
    """x [1, 4, 6, 6] -> Conv -> BatchNormalization -> y."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    group = draw(st.sampled_from([1, 2, 4]))
    outs = 4 * draw(st.integers(1, 3))
    offset = draw(st.sampled_from([0.0, 10.0, 1000.0]))
    arr = lambda a: np.asarray(a, np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(arr(rng.standard_normal((outs, 4 // group, 3, 3)) * 0.3),
                                     "w"),
             numpy_helper.from_array(arr(1 + 0.2 * rng.standard_normal(outs)), "gamma"),
             numpy_helper.from_array(arr(0.1 * rng.standard_normal(outs)), "beta"),
             numpy_helper.from_array(arr(offset + rng.standard_normal(outs)), "mean"),
             numpy_helper.from_array(arr(rng.uniform(0.01, 2.0, outs)), "var")]
    conv_in = ["x", "w"]
    if draw(st.booleans()):
        inits.append(numpy_helper.from_array(arr(offset + rng.standard_normal(outs)), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], group=group),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"],
                              ["y"], epsilon=draw(st.sampled_from([1e-5, 1e-3])))]
    return _model(nodes, inits, ["y"], draw(st.booleans()))


@st.composite
def decision_models(draw) -> Tuple[onnx.ModelProto, str]:
    """x -> Conv -> f; a decision on f gives indices a Gather reads: (model, f's name)."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    op = draw(st.sampled_from(["ArgMax", "ArgMin", "TopK"]))
    inits = [numpy_helper.from_array(
        (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([2], np.int64), "k")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["f"], pads=[1, 1, 1, 1])]
    if op == "TopK":
        nodes.append(helper.make_node("TopK", ["f", "k"], ["top", "idx"], axis=1))
    else:
        nodes.append(helper.make_node(op, ["f"], ["idx"], axis=1, keepdims=1))
    nodes.append(helper.make_node("GatherElements", ["f", "idx"], ["y"], axis=1))
    return _model(nodes, inits, ["y"], draw(st.booleans())), "f"
