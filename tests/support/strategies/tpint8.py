"""Causal attention whose mask constant (0 above a fill: -inf, float32's lowest, -1e9) is added
to the scores before a Softmax, as a traced PyTorch decoder writes it (g2p-id's tiny-pron):
the form ``quantize/finite.py`` clamps before quantize_static."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

FILLS = (-np.inf, float(np.finfo(np.float32).min), -1e9)


def causal_attention(seq: int = 4, dim: int = 8, fill: float = -np.inf, seed: int = 1,
                     mask_reader: str = "Add") -> onnx.ModelProto:
    """x -> scores = (x Wq)(x Wk)^T, ``mask_reader``(scores, causal mask) -> Softmax ->
    MatMul with x Wv (the mask's upper triangle holds ``fill``, the rest 0)."""
    rng = np.random.default_rng(seed)
    mask = np.triu(np.full((seq, seq), fill, np.float32), 1)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (dim, dim)).astype(np.float32), n)
             for n in ("wq", "wk", "wv")] + [numpy_helper.from_array(mask, "causal")]
    nodes = [helper.make_node("MatMul", ["x", w], [f"{w}_out"], name=f"proj_{w}")
             for w in ("wq", "wk", "wv")]
    nodes += [helper.make_node("Transpose", ["wk_out"], ["kt"], perm=[0, 2, 1], name="kt"),
              helper.make_node("MatMul", ["wq_out", "kt"], ["scores"], name="scores"),
              helper.make_node(mask_reader, ["scores", "causal"], ["masked"], name="mask"),
              helper.make_node("Softmax", ["masked"], ["weights"], axis=-1, name="softmax"),
              helper.make_node("MatMul", ["weights", "wv_out"], ["y"], name="attend")]
    graph = helper.make_graph(
        nodes, "causal", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, dim])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@st.composite
def causal_attentions(draw) -> Tuple[onnx.ModelProto, np.ndarray]:
    """A causal attention (any length, width, fill, weights) and an input in [-2, 2]."""
    seq, dim = draw(st.integers(2, 6)), draw(st.integers(2, 8))
    seed = draw(st.integers(0, 2**16))
    model = causal_attention(seq, dim, draw(st.sampled_from(FILLS)), seed)
    x = np.random.default_rng(seed + 1).uniform(-2, 2, (1, seq, dim)).astype(np.float32)
    return model, x
