"""Hypothesis strategy of int8 token FCs: ``QuantizeLinear -> DequantizeLinear -> MatMul by an
int8 [C, O] weight -> QuantizeLinear -> DequantizeLinear`` on a float ``[B, T, C]`` input (a
transformer projection as Marvell's recipe writes it: symmetric per-tensor int8), with an
optional Relu between QDQ pairs at the FC's scale or its own, or a LeakyRelu (fused as a LUT),
drawn shapes and scales (issue 45, finding 5: ``mrvl.qnn_fc_tokens``)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from support.strategies.generated import GeneratedModel


def _scalar(name: str, value, dtype) -> "object":
    return numpy_helper.from_array(np.asarray(value, dtype=dtype).reshape(()), name)


def _qdq(nodes: list, inits: list, source: str, scale: float, tag: str) -> str:
    """``source`` quantized to int8 at ``scale`` and dequantized back: its float name."""
    inits.append(_scalar(f"s_{tag}", scale, np.float32))
    nodes.append(helper.make_node("QuantizeLinear", [source, f"s_{tag}", "zp"], [f"q_{tag}"],
                                  name=f"Q_{tag}"))
    nodes.append(helper.make_node("DequantizeLinear", [f"q_{tag}", f"s_{tag}", "zp"],
                                  [f"f_{tag}"], name=f"DQ_{tag}"))
    return f"f_{tag}"


@st.composite
def token_fc_models(draw) -> GeneratedModel:
    """One int8 token FC (module docstring) and a feed of seeded normals times a drawn peak."""
    batch = draw(st.integers(1, 3), label="batch")
    tokens = draw(st.integers(1, 24), label="tokens")
    cin = draw(st.integers(1, 96), label="in features")
    cout = draw(st.integers(1, 64), label="out features")
    relu = draw(st.sampled_from(["none", "same scale", "own scale", "leaky"]), label="relu")
    seed = draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    peak = float(draw(st.sampled_from([0.5, 2.0, 8.0]), label="input peak"))
    s_in, s_w = np.float32(peak / 127), np.float32(rng.uniform(0.002, 0.05))
    # The output scale covers a typical product, so some values saturate and most do not.
    s_out = np.float32(s_in * s_w * 127 * np.sqrt(cin) * rng.uniform(0.05, 0.5) / 127 * 4)
    weight = rng.integers(-127, 128, (cin, cout)).astype(np.int8)
    nodes: list = []
    inits = [_scalar("zp", 0, np.int8), numpy_helper.from_array(weight, "w_q"),
             _scalar("s_w", s_w, np.float32)]
    nodes.append(helper.make_node("DequantizeLinear", ["w_q", "s_w", "zp"], ["w"], name="DQ_w"))
    x = _qdq(nodes, inits, "x", s_in, "x")
    nodes.append(helper.make_node("MatMul", [x, "w"], ["y"], name="fc"))
    y = _qdq(nodes, inits, "y", s_out, "y")
    if relu != "none":
        nodes.append(helper.make_node("LeakyRelu", [y], ["r"], name="relu", alpha=0.1)
                     if relu == "leaky" else helper.make_node("Relu", [y], ["r"], name="relu"))
        y = _qdq(nodes, inits, "r", s_out if relu == "same scale" else s_out * 0.75, "r")
    shape = [batch, tokens, cin]
    graph = helper.make_graph(nodes, "token_fc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT,
                                                             [batch, tokens, cout])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feed = {"x": (rng.standard_normal(shape) * peak / 2).astype(np.float32)}
    return GeneratedModel(model, feed, f"token FC [{batch}, {tokens}, {cin}] x [{cin}, "
                          f"{cout}], relu {relu}, scales {s_in!r} {s_w!r} {s_out!r}, "
                          f"seed {seed}")
