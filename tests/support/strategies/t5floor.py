"""Strategies for the fp16 floor's mask clamp (``verify/floor_masks.py``): HF's extended
attention mask ``(1 - Cast(mask)) * fill`` added to the scores before a Softmax, the fill below
fp16's range (finfo(float32).min as torch exports it, or another), a Constant node or an
initializer, over a 0/1 mask with at least one unmasked position."""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

LOWEST = float(np.finfo(np.float32).min)


def masked_attention(fill: float, softmax: bool = True, length: int = 6,
                     as_constant: bool = True) -> onnx.ModelProto:
    """scores [1, 2, L, L] + Unsqueeze((1 - Cast(mask)) * ``fill``) -> Softmax -> MatMul v.
    Without ``softmax`` the masked scores are the output (no additive mask)."""
    fill_value = numpy_helper.from_array(np.array(fill, np.float32), "fill")
    nodes = [helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "maskf"], ["inverted"]),
             helper.make_node("Mul", ["inverted", "fill"], ["additive"], name="mask_mul"),
             helper.make_node("Unsqueeze", ["additive", "axes"], ["additive4"]),
             helper.make_node("Add", ["scores", "additive4"], ["masked"])]
    out = "masked"
    if softmax:
        nodes += [helper.make_node("Softmax", ["masked"], ["weights"], axis=-1),
                  helper.make_node("MatMul", ["weights", "v"], ["out"])]
        out = "out"
    inits = [numpy_helper.from_array(np.array(1, np.float32), "one"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "axes"),
             numpy_helper.from_array(np.random.default_rng(0).standard_normal(
                 (1, 2, length, 4)).astype(np.float32), "v")]
    if as_constant:  # torch's export: the fill a Constant node
        nodes.insert(0, helper.make_node("Constant", [], ["fill"], value=fill_value))
    else:
        inits.append(fill_value)
    graph = helper.make_graph(
        nodes, "masked_attention",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, length, length]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [1, length])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@st.composite
def masked_attentions(draw) -> Tuple[float, int, bool, Dict[str, np.ndarray]]:
    """(fill, length, as_constant, feed): a fill below -32752, scores within the clamp's bound
    (standard normal, scaled up to 100) and a 0/1 mask with at least one 1."""
    fill = draw(st.sampled_from([LOWEST, -1e38, -1e9, -40000.0]))
    length = draw(st.integers(2, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    mask = rng.integers(0, 2, (1, length)).astype(np.int64)
    mask[0, draw(st.integers(0, length - 1))] = 1
    scale = draw(st.sampled_from([1.0, 10.0, 100.0]))
    scores = (scale * rng.standard_normal((1, 2, length, length))).astype(np.float32)
    return fill, length, draw(st.booleans()), {"scores": scores, "mask": mask}
