"""Hypothesis strategies for sequence-first ``[T, 1, E]`` layers (``frontend/seq_first.py``):
a drawn chain of per-position ops (bias and positional Adds, Muls by per-feature scales, unary
activations, MatMuls by constants, last-axis means and their Subs, last-axis Softmaxes,
residual Adds, a mean over the positions added back) on a
``[T, 1, E]`` made by a Transpose of a batch-first input or by an embedding Gather."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

_STEPS = ("bias", "positions", "scale", "relu", "tanh", "matmul", "center", "residual",
          "softmax", "pooled")


@dataclass
class SeqFirstCase:
    model: onnx.ModelProto
    feeds: Dict[str, np.ndarray]
    spec: dict


class _Chain:
    """Nodes and constants of one drawn chain; ``last`` names the current ``[T, 1, width]``."""

    def __init__(self, rng: np.random.Generator, steps: int, width: int) -> None:
        self.rng, self.steps, self.width = rng, steps, width
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.last, self.saved, self.count = "s", ("s", width), 0

    def const(self, shape) -> str:
        name = f"c{len(self.inits)}"
        value = self.rng.standard_normal(shape).astype(np.float32) / 2
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: List[str], **attrs) -> str:
        self.count += 1
        out = f"t{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self.count}", **attrs))
        self.last = out
        return out

    def step(self, kind: str) -> None:
        width, last = self.width, self.last
        if kind == "bias":
            self.node("Add", [self.const([width]), last])
        elif kind == "positions":
            self.node("Add", [last, self.const([self.steps, 1, width])])
        elif kind == "scale":
            self.node("Mul", [last, self.const([width])])
        elif kind in ("relu", "tanh"):
            self.node(kind.capitalize(), [last])
        elif kind == "matmul":
            self.width = 2 * width if width < 16 else width // 2
            self.node("MatMul", [last, self.const([width, self.width])])
        elif kind == "softmax":
            self.node("Softmax", [last], axis=-1)
        elif kind == "pooled":  # a mean over the positions added back: mixes positions
            pooled = self.node("ReduceMean", [last], axes=[0])
            self.node("Add", [last, pooled])
        elif kind == "center":
            mean = self.node("ReduceMean", [last], axes=[-1])
            self.node("Sub", [last, mean])
        elif self.saved[1] == width:  # residual: the saved tensor plus this one
            self.node("Add", [self.saved[0], last])
        self.saved = (self.last, self.width) if self.rng.random() < 0.5 else self.saved


@st.composite
def seq_first_models(draw, entry: str = None) -> SeqFirstCase:
    steps = draw(st.integers(2, 9))
    width = draw(st.sampled_from([4, 8, 12]))
    kinds = draw(st.lists(st.sampled_from(_STEPS), min_size=1, max_size=8))
    entry = entry or draw(st.sampled_from(["Transpose", "Gather"]))
    seed = draw(st.integers(0, 2**16))
    chain = _Chain(np.random.default_rng(seed), steps, width)
    if entry == "Transpose":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, steps, width])
        chain.nodes.append(helper.make_node("Transpose", ["x"], ["s"], name="entry",
                                            perm=[1, 0, 2]))
    else:
        x = helper.make_tensor_value_info("x", TensorProto.INT64, [steps, 1])
        chain.nodes.append(helper.make_node("Gather", [chain.const([10, width]), "x"], ["s"],
                                            name="entry"))
    for kind in kinds:
        chain.step(kind)
    chain.nodes.append(helper.make_node("Transpose", [chain.last], ["y"], name="exit",
                                        perm=[1, 0, 2]))
    graph = helper.make_graph(chain.nodes, "seq_first_chain", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, steps, chain.width])],
        chain.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    rng = np.random.default_rng(seed + 1)
    feeds = {"x": rng.standard_normal((1, steps, width)).astype(np.float32)
             if entry == "Transpose" else rng.integers(0, 10, (steps, 1)).astype(np.int64)}
    return SeqFirstCase(onnx.shape_inference.infer_shapes(model), feeds,
                        {"steps": steps, "kinds": kinds, "entry": entry})
