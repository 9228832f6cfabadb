"""Strategies for CNNs with a constant minus an activation between two Convs, as a YOLOv8 head
writes ``anchors - distances`` and tf2onnx a LayerNorm's ``beta - mean * scale``: the constant
a scalar, per-channel, per-column or full-shaped (it never broadcasts the activation up), an
optional fused activation after it (``frontend/canonical_forms.py``: ``Sub(c, x)``)."""
from __future__ import annotations

import math

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper, numpy_helper

CONST_FORMS = ("scalar", "channel", "column", "full")


def _const_shape(form: str, channels: int, side: int) -> tuple:
    return {"scalar": (), "channel": (1, channels, 1, 1), "column": (side,),
            "full": (1, channels, side, side)}[form]


@st.composite
def const_minus_cnns(draw) -> onnx.ModelProto:
    """Conv -> Sub(c, conv) [-> Relu | Sigmoid] -> Conv on a 1x3xSxS image, 2 to 12 channels,
    S 4 to 10; c drawn from ``CONST_FORMS`` with values up to 4 (exact zeros among them)."""
    channels, side = draw(st.integers(2, 12)), draw(st.integers(4, 10))
    form = draw(st.sampled_from(CONST_FORMS))
    act = draw(st.sampled_from([None, "Relu", "Sigmoid"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    const = 4 * rng.standard_normal(_const_shape(form, channels, side))
    const.reshape(-1)[: max(1, const.size // 4)] = 0.0
    middle = [helper.make_node("Sub", ["c", "c1"], ["d" if act else "f"], name="const_minus")]
    if act:
        middle.append(helper.make_node(act, ["d"], ["f"], name="act"))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="c1"),
             *middle,
             helper.make_node("Conv", ["f", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], name="c2")]
    inits = {"w1": rng.standard_normal((channels, 3, 3, 3)) / 3,
             "b1": 0.1 * rng.standard_normal(channels), "c": np.asarray(const),
             "w2": rng.standard_normal((channels, channels, 3, 3)) / (3 * math.sqrt(channels)),
             "b2": 0.1 * rng.standard_normal(channels)}
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, channels, side, side])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@st.composite
def packed_attentions(draw) -> onnx.ModelProto:
    """PaddlePaddle's packed attention (``frontend/packed_qkv.py``) on [1, N, H*d]: one qkv FC,
    Reshape [1, N, 3, H, d], Transpose [2, 0, 3, 1, 4], Slice + Squeeze per piece, scaled
    q k^T, Softmax, times v, merged back; N 2 to 8, H 1 to 4, d 2 to 8."""
    from support.models import Builder

    tokens, heads = draw(st.integers(2, 8)), draw(st.integers(1, 4))
    depth = draw(st.integers(2, 8))
    width = heads * depth
    b = Builder(seed=draw(st.integers(0, 2**16)))
    x = b.input("x", [1, tokens, width])
    five = b.op("Reshape", [b.matmul_add(x, width, 3 * width),
                            b.const(np.array([1, tokens, 3, heads, depth], np.int64))])
    packed = b.op("Transpose", [five], name="split", perm=[2, 0, 3, 1, 4])
    q, k, v = (b.op("Squeeze", [b.op("Slice", [packed] + [b.const(np.array([s], np.int64))
                                                          for s in (i, i + 1, 0)]),
                                b.const(np.array([0], np.int64))]) for i in range(3))
    scale = b.const(np.array([1.0 / math.sqrt(depth)], np.float32))
    scores = b.op("MatMul", [b.op("Mul", [q, scale]), b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    out = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    out = b.op("Reshape", [b.op("Transpose", [out], perm=[0, 2, 1, 3]),
                           b.const(np.array([1, tokens, width], np.int64))])
    return b.model([out])
