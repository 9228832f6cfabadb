"""Strategies for ``verify/kept_graph.py``: float models of elementwise ops (each reading one
or two earlier tensors, a constant that several nodes may share), some of their nodes grouped
into fp16 layers of one to three consecutive nodes, some tensors a layer reads unrounded, and
a graph output in the middle now and then: what ``round_groups`` rewrites layer after layer."""
from __future__ import annotations

from typing import List, Set, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

SHAPE = [1, 2, 3, 4]
_UNARY = ("Relu", "Sigmoid", "Tanh", "Abs", "HardSigmoid", "HardSwish", "Elu")
_WITH_CONSTANT = ("Mul", "Add", "Div")
_BINARY = ("Add", "Mul")


@st.composite
def grouped_models(draw) -> Tuple[onnx.ModelProto, List[List[str]], List[Set[str]]]:
    """(model with input ``x``, the fp16 layers' node names, what each reads unrounded)."""
    count = draw(st.integers(2, 14))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    constants = [f"k{j}" for j in range(draw(st.integers(1, 3)))]
    tensors, nodes = ["x"], []
    for k in range(count):
        kind = draw(st.sampled_from(("unary", "constant", "binary")))
        first = draw(st.sampled_from(tensors))
        if kind == "unary":
            op, inputs = draw(st.sampled_from(_UNARY)), [first]
        elif kind == "constant":
            op, inputs = draw(st.sampled_from(_WITH_CONSTANT)), [first,
                                                                draw(st.sampled_from(constants))]
        else:
            op, inputs = draw(st.sampled_from(_BINARY)), [first, draw(st.sampled_from(tensors))]
        nodes.append(helper.make_node(op, inputs, [f"t{k}"], name=f"n{k}"))
        tensors.append(f"t{k}")
    outputs = [tensors[-1]] + ([draw(st.sampled_from(tensors[1:-1]))]
                               if count > 2 and draw(st.booleans()) else [])
    groups, unrounded, k = [], [], 0
    while k < count:
        size = draw(st.integers(1, 3))
        if draw(st.booleans()):  # an fp16 layer; else the nodes stay float
            groups.append([f"n{j}" for j in range(k, min(k + size, count))])
            read = [i for j in range(k, min(k + size, count)) for i in nodes[j].input]
            unrounded.append(set(draw(st.lists(st.sampled_from(read), max_size=2))))
        k += size
    weights = [numpy_helper.from_array((rng.uniform(0.5, 1.5, SHAPE[-1])
                                        * rng.choice([-1, 1])).astype(np.float32), name)
               for name in constants]
    graph = helper.make_graph(
        nodes, "grouped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE) for n in outputs], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), groups, \
        unrounded
