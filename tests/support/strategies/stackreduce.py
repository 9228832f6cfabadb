"""Random reductions over a stacked axis (frontend/stack_reductions.py): two to four float
inputs of one shape (batch 1, rank 2 or 3), each through a Tanh scaled by its own constant,
joined on a new axis by ``Unsqueeze`` + ``Concat`` (torch.stack) or by a ``Concat`` of inputs
already of size 1 there, then ``ReduceMax`` / ``ReduceMin`` / ``ReduceSum`` / ``ReduceMean``
over that axis, keepdims or not; the axis negative or not in the Concat, the Unsqueeze and the
reduction independently; opset 11 (axes attributes), 13 (ReduceSum's and Unsqueeze's axes
inputs) or 18 (every axes an input).

``stack_reduce_models()`` draws a spec (a flat JSON-able dict); ``stack_reduce_from_spec(spec)``
builds the model and its feeds from it alone (pasteable into an ``@example``).
"""
from __future__ import annotations

from typing import List

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from support.strategies.generated import GeneratedModel

REDUCTIONS = ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean")

_U = 2.0 ** -24  # float32's unit roundoff


def bound(op: str, stacked: np.ndarray, axis: int, keepdims: int) -> np.ndarray:
    """The module's bound on |after - before| per output element (0: bit-equal)."""
    n = stacked.shape[axis]
    magnitude = np.abs(stacked.astype(np.float64)).sum(axis=axis, keepdims=bool(keepdims))
    factor = {"ReduceMax": 0.0, "ReduceMin": 0.0, "ReduceSum": 2.0 * (n - 1),
              "ReduceMean": 2.0 * (n + 1) / n}[op]
    return factor * _U * magnitude


class StackReduceModel(GeneratedModel):
    rebuilt_by = "stack_reduce_from_spec"


@st.composite
def stack_reduce_models(draw) -> StackReduceModel:
    rank = draw(st.sampled_from([2, 3]))
    shape = [1] + [draw(st.integers(1, 5)) for _ in range(rank - 1)]
    axis = draw(st.integers(0, rank))  # the stacked axis, in the joined rank + 1
    spec = {"shape": shape, "n": draw(st.integers(2, 4)), "axis": axis,
            "op": draw(st.sampled_from(REDUCTIONS)), "keepdims": draw(st.sampled_from([0, 1])),
            "stack": draw(st.booleans()), "opset": draw(st.sampled_from([11, 13, 18])),
            "negative": draw(st.lists(st.booleans(), min_size=3, max_size=3)),
            "seed": draw(st.integers(0, 2 ** 16))}
    return stack_reduce_from_spec(spec)


def _axis(spec: dict, which: int) -> int:
    """The stacked axis as the Concat (0), Unsqueeze (1) or reduction (2) spells it."""
    rank = len(spec["shape"]) + 1
    return spec["axis"] - rank if spec["negative"][which] else spec["axis"]


def _axes_input(op: str, opset: int) -> bool:
    """Whether ``op`` takes its axes as an input at ``opset``."""
    return opset >= 18 or (opset >= 13 and op in ("ReduceSum", "Unsqueeze"))


def _with_axes(op: str, inputs: List[str], output: str, name: str, axis: int, opset: int,
               inits: list, **attrs) -> onnx.NodeProto:
    if _axes_input(op, opset):
        inits.append(numpy_helper.from_array(np.array([axis], np.int64), f"{name}_axes"))
        return helper.make_node(op, inputs + [f"{name}_axes"], [output], name=name, **attrs)
    return helper.make_node(op, inputs, [output], name=name, axes=[axis], **attrs)


def stack_reduce_from_spec(spec: dict) -> StackReduceModel:
    rng = np.random.default_rng(spec["seed"])
    shape, axis, opset = list(spec["shape"]), spec["axis"], spec["opset"]
    stacked = shape[:axis] + [1] + shape[axis:]
    inputs, nodes, inits, parts = [], [], [], []
    for i in range(spec["n"]):
        inputs.append(helper.make_tensor_value_info(
            f"x{i}", TensorProto.FLOAT, shape if spec["stack"] else stacked))
        scale = np.float32(rng.uniform(0.5, 4.0) * 10.0 ** rng.integers(-2, 3))
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), f"s{i}"))
        nodes.append(helper.make_node("Tanh", [f"x{i}"], [f"t{i}"], name=f"tanh{i}"))
        nodes.append(helper.make_node("Mul", [f"t{i}", f"s{i}"], [f"b{i}"], name=f"scale{i}"))
        parts.append(f"b{i}")
        if spec["stack"]:
            nodes.append(_with_axes("Unsqueeze", [f"b{i}"], f"u{i}", f"unsqueeze{i}",
                                    _axis(spec, 1), opset, inits))
            parts[-1] = f"u{i}"
    nodes.append(helper.make_node("Concat", parts, ["stacked"], name="stack",
                                  axis=_axis(spec, 0)))
    nodes.append(_with_axes(spec["op"], ["stacked"], "reduced", "reduce", _axis(spec, 2),
                            opset, inits, keepdims=spec["keepdims"]))
    out = stacked if spec["keepdims"] else shape
    output = helper.make_tensor_value_info("reduced", TensorProto.FLOAT, out)
    graph = helper.make_graph(nodes, "stack_reduce", inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in inputs}
    return StackReduceModel(model=model, feeds=feeds, description=f"{spec['op']} of a stack",
                            spec=spec)


def stacked_operands(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    """The values the reduction reads (the Concat's output), from onnxruntime."""
    from support.models import run_ort
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.append(helper.make_tensor_value_info("stacked", TensorProto.FLOAT, None))
    return run_ort(probe, feeds, optimize=False)["stacked"]
