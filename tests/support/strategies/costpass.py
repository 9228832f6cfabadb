"""Graphs for fold_view.py: constant chains, Constant nodes, shape arithmetic and activations
mixed, so graphsurgeon's folding has something to fold among nodes it must leave."""
from __future__ import annotations

from typing import List, Sequence

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

SHAPE = [1, 4, 6, 6]


class FoldGraph:
    """A float [1, 4, 6, 6] input ``x`` and ops appended on named tensors."""

    def __init__(self) -> None:
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []

    def const(self, value: np.ndarray) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], name: str = "", **attrs: object) -> str:
        out = f"{op_type}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name or out,
                                           **attrs))
        return out

    def constant_node(self, value: np.ndarray) -> str:
        return self.op("Constant", [], value=numpy_helper.from_array(np.asarray(value)))

    def reshape_by_shape(self, data: str) -> str:
        """``Reshape(data, Concat(Unsqueeze(Gather(Shape(data), 0)), [-1]))``: folds to a
        constant shape once the input shape is static."""
        dim = self.op("Gather", [self.op("Shape", [data]), self.const(np.int64(0))], axis=0)
        target = self.op("Concat", [self.op("Unsqueeze", [dim, self.const(np.array([0]))]),
                                    self.const(np.array([-1]))], axis=0)
        return self.op("Reshape", [data, target])

    def model(self, outputs: Sequence[str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "fold_view", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                    SHAPE)],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        return model


_STEPS = ("scale", "constant_node", "reshape", "relu", "folded_bias")


@st.composite
def fold_models(draw: st.DrawFn) -> onnx.ModelProto:
    """A chain of 2-6 steps on ``x``; each either reads only ``x``'s path or adds a constant
    side chain (Constant node, Mul/Add of initializers) it reads."""
    g = FoldGraph()
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    value = "x"
    outputs: List[str] = []
    for step in draw(st.lists(st.sampled_from(_STEPS), min_size=2, max_size=6)):
        if step == "scale":
            value = g.op("Mul", [value, g.const(rng.standard_normal(SHAPE[1:]).astype("f4"))])
        elif step == "constant_node":
            value = g.op("Add", [value, g.constant_node(rng.standard_normal([6]).astype("f4"))])
        elif step == "reshape":
            value = g.op("Reshape", [g.reshape_by_shape(value), g.const(np.array(SHAPE))])
        elif step == "relu":
            value = g.op("Relu", [value])
        else:  # Add(x, Sqrt(c0 * c1) + Constant): a constant chain to fold
            chain = g.op("Sqrt", [g.op("Mul", [g.const(rng.random(6).astype("f4")),
                                               g.const(rng.random(6).astype("f4"))])])
            chain = g.op("Add", [chain, g.constant_node(rng.random(6).astype("f4"))])
            if draw(st.booleans()):
                outputs.append(chain)  # a folded tensor that is a model output too
            value = g.op("Add", [value, chain])
    return g.model([value, *outputs])
