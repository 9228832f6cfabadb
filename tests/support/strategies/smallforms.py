"""Hypothesis strategies for the scout's small forms: a Softmax over an axis followed only by
unit axes (``frontend/softmax_axes.py``) and an ai.onnx.ml Scaler (``canonical_forms._scaler``),
each a one-node model with a feed that holds extremes (large, tiny, both signs, zeros)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper


@dataclass
class Case:
    model: onnx.ModelProto
    feeds: Dict[str, np.ndarray]


def _feed(shape: List[int], seed: int, spread: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-spread, spread + 1, shape)
    flat = x.reshape(-1)
    flat[:min(2, flat.size)] = [0.0, -0.0][:min(2, flat.size)]
    return x.astype(np.float32)


def _model(node: onnx.NodeProto, in_shape, out_shape, opsets, dtype=TensorProto.FLOAT):
    graph = helper.make_graph([node], "one", [helper.make_tensor_value_info("x", dtype,
                                                                           in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid(d, v) for d, v in opsets])


@st.composite
def unit_axis_softmaxes(draw) -> Case:
    """Softmax on axis k of a shape whose axes after k are 1 (k < rank - 1; not the 4-D channel
    Softmax the layers take as it is), axis written positive or negative, opset 11 or 13."""
    lead = draw(st.lists(st.integers(1, 5), min_size=0, max_size=2))
    size = draw(st.integers(2, 64))
    units = draw(st.integers(1, 3))
    units += len(lead) == 1 and units == 2  # [N, C, 1, 1] on axis 1: the layers' channel form
    shape = lead + [size] + [1] * units
    axis = len(lead) - (len(shape) if draw(st.booleans()) else 0)
    opset = draw(st.sampled_from([11, 13]))
    node = helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=axis)
    return Case(_model(node, shape, shape, [("", opset)]),
                {"x": _feed(shape, draw(st.integers(0, 999)), 2)})


@st.composite
def scalers(draw) -> Case:
    """Scaler of a float32 [N, C] (or [C]) tensor, one offset and scale per feature or one of
    each for all."""
    features = draw(st.integers(1, 12))
    shape = [draw(st.integers(1, 4)), features] if draw(st.booleans()) else [features]
    count = draw(st.sampled_from([1, features]))
    values = st.floats(-1e3, 1e3, allow_nan=False, width=32)
    offset = draw(st.lists(values, min_size=count, max_size=count))
    scale = draw(st.lists(values, min_size=count, max_size=count))
    node = helper.make_node("Scaler", ["x"], ["y"], name="scaler", domain="ai.onnx.ml",
                            offset=offset, scale=scale)
    return Case(_model(node, shape, shape, [("", 17), ("ai.onnx.ml", 1)]),
                {"x": _feed(shape, draw(st.integers(0, 999)), 3)})
