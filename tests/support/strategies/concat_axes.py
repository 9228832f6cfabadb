"""Random Concats on H or W of 4-D tensors (frontend/concat_views.py): two or three float
inputs ``[N, C, H, W]`` of a batch-1 or batch-2 model (C, H, W from 1 to 4, the joined axis's
size per input), each through a Relu (float) or as it comes (int8), joined by a Concat on axis
2 or 3 (negative or not); in the int8 form each input through a per-tensor symmetric int8 Q/DQ
pair of its own scale and the join through one of another (a QDQ model's Concat); an Add of a
constant reads the join.

``concat_axes_models()`` draws a spec (a flat JSON-able dict); ``concat_axes_from_spec(spec)``
builds the model and its feeds from it alone (pasteable into an ``@example``).
"""
from __future__ import annotations

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from support.strategies.generated import GeneratedModel


class ConcatAxesModel(GeneratedModel):
    rebuilt_by = "concat_axes_from_spec"


@st.composite
def concat_axes_models(draw, int8=None) -> ConcatAxesModel:
    batch = draw(st.sampled_from([1, 2]))
    spec = {"shape": [batch] + [draw(st.integers(1, 4)) for _ in range(3)],
            "axis": draw(st.sampled_from([2, 3])), "negative": draw(st.booleans()),
            "sizes": draw(st.lists(st.integers(1, 4), min_size=2, max_size=3)),
            "int8": draw(st.booleans()) if int8 is None else int8,
            "scales": draw(st.lists(st.sampled_from([0.004, 0.01, 0.03]), min_size=4,
                                    max_size=4)),
            "seed": draw(st.integers(0, 2 ** 16))}
    return concat_axes_from_spec(spec)


def _pair(x: str, scale: str, tag: str, nodes: list) -> str:
    nodes.append(helper.make_node("QuantizeLinear", [x, scale, "zero"], [f"{tag}_q"],
                                  name=f"{tag}_quantize"))
    nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", scale, "zero"],
                                  [f"{tag}_dq"], name=f"{tag}_dequantize"))
    return f"{tag}_dq"


def concat_axes_from_spec(spec: dict) -> ConcatAxesModel:
    axis = spec["axis"]
    inputs, nodes, parts = [], [], []
    inits = [numpy_helper.from_array(np.array(0, np.int8), "zero")] + [
        numpy_helper.from_array(np.array(s, np.float32), f"scale{i}")
        for i, s in enumerate(spec["scales"])]
    joined = list(spec["shape"])
    joined[axis] = sum(spec["sizes"])
    for i, size in enumerate(spec["sizes"]):
        shape = list(spec["shape"])
        shape[axis] = size
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape))
        if spec["int8"]:  # an int8 region has no int8 Relu: the inputs quantized as they come
            parts.append(_pair(f"x{i}", f"scale{i}", f"in{i}", nodes))
        else:
            nodes.append(helper.make_node("Relu", [f"x{i}"], [f"r{i}"], name=f"relu{i}"))
            parts.append(f"r{i}")
    nodes.append(helper.make_node("Concat", parts, ["joined"], name="join",
                                  axis=axis - 4 if spec["negative"] else axis))
    last = _pair("joined", "scale3", "out", nodes) if spec["int8"] else "joined"
    # an Add of a constant: concat_sinking.py moves a Concat past one-input elementwise ops
    # and Q/DQ pairs (to the output here), not past this
    inits.append(numpy_helper.from_array(
        np.linspace(-1, 1, int(np.prod(joined)), dtype=np.float32).reshape(joined), "offset"))
    nodes.append(helper.make_node("Add", [last, "offset"], ["y"], name="after"))
    graph = helper.make_graph(nodes, "concat_axes", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, joined)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    rng = np.random.default_rng(spec["seed"])
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) * (0.3 if spec["int8"] else 10.0 ** rng.integers(-3, 4))
             for i in inputs}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    return ConcatAxesModel(model=model, feeds=feeds, spec=spec,
                           description=f"{'int8 ' if spec['int8'] else ''}Concat on axis {axis}")
