"""Strategies for the int8 tails of vietcombank_captcha and sscd_distilled: a pooled CNN whose
head our recipe quantizes only after its Squeeze (``frontend/view_pairs.py``), with an
optional second FC and an optional L2 normalisation of the embedding (``rules/checks_l2.py``:
the norm and the Div read two DequantizeLinear copies of x)."""
from __future__ import annotations

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper, numpy_helper


@st.composite
def pooled_heads(draw) -> onnx.ModelProto:
    """Conv -> Relu -> GlobalAveragePool -> Squeeze -> MatMul + Add [-> Relu -> MatMul + Add]
    [-> x / max(||x||, eps)] of 2 to 16 channels and 2 to 12 outputs."""
    channels, out = draw(st.integers(2, 16)), draw(st.integers(2, 12))
    second, l2 = draw(st.booleans()), draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Squeeze", ["p", "axes"], ["s"], name="view"),
             helper.make_node("MatMul", ["s", "w1"], ["m1"], name="fc1"),
             helper.make_node("Add", ["m1", "b1"], ["y1"], name="bias1")]
    inits = {"w": rng.standard_normal((channels, 3, 3, 3)), "b": rng.standard_normal(channels),
             "axes": np.array([2, 3]), "w1": rng.standard_normal((channels, out)),
             "b1": rng.standard_normal(out) * 0.1}
    last = "y1"
    if second:
        nodes += [helper.make_node("Relu", ["y1"], ["r1"], name="relu1"),
                  helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
                  helper.make_node("Add", ["m2", "b2"], ["y2"], name="bias2")]
        inits.update(w2=rng.standard_normal((out, out)), b2=rng.standard_normal(out) * 0.1)
        last = "y2"
    if l2:
        clamp = draw(st.sampled_from(["Clip", "Max"]))
        nodes += [helper.make_node("ReduceL2", [last], ["n"], name="norm", axes=[1],
                                   keepdims=1),
                  helper.make_node(clamp, ["n", "eps"], ["e"], name="clamp"),
                  helper.make_node("Div", [last, "e"], ["y"], name="normalized")]
        inits["eps"] = np.array(1e-12)
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    return _model(nodes, inits, out)


def _model(nodes, inits, out: int) -> onnx.ModelProto:
    """float32 weights, int64 axes (``support.int8.float_model`` makes every one float32)."""
    tensors = [numpy_helper.from_array(
        np.asarray(v, np.int64 if k == "axes" else np.float32), k) for k, v in inits.items()]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, out])], tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model
