"""Strategies for CNNs whose float ops sit between int8 Convs once our recipe drops the QDQ
pairs between ops of no int8 form (``quantize/ort_quantize.py``, ``frontend/float_pairs.py``):
an Elu (optionally after an NHWC Transpose and a batch Squeeze, as madmom writes it), a
LayerNorm over the channels (two ReduceMeans over axis 1), or an Erf GELU."""
from __future__ import annotations

import math

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper, numpy_helper

FLOAT_OPS = ("elu", "elu_nhwc", "channel_norm", "gelu")


def _elu(nhwc: bool, alpha: float):
    if not nhwc:
        return [helper.make_node("Elu", ["c1"], ["f"], alpha=alpha, name="elu")], {}
    nodes = [helper.make_node("Transpose", ["c1"], ["t1"], perm=[0, 2, 3, 1], name="to_nhwc"),
             helper.make_node("Squeeze", ["t1", "axis0"], ["s1"], name="squeeze"),
             helper.make_node("Elu", ["s1"], ["e"], alpha=alpha, name="elu"),
             helper.make_node("Unsqueeze", ["e", "axis0"], ["u1"], name="unsqueeze"),
             helper.make_node("Transpose", ["u1"], ["f"], perm=[0, 3, 1, 2], name="to_nchw")]
    return nodes, {"axis0": np.array([0], np.int64)}


def _channel_norm(channels: int, rng: np.random.Generator):
    nodes = [helper.make_node("ReduceMean", ["c1"], ["m"], axes=[1], name="mean"),
             helper.make_node("Sub", ["c1", "m"], ["d"], name="centre"),
             helper.make_node("Mul", ["d", "d"], ["d2"], name="square"),
             helper.make_node("ReduceMean", ["d2"], ["v"], axes=[1], name="variance"),
             helper.make_node("Add", ["v", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             helper.make_node("Div", ["d", "sd"], ["n"], name="normalize"),
             helper.make_node("Mul", ["n", "gamma"], ["ng"], name="scale"),
             helper.make_node("Add", ["ng", "beta"], ["f"], name="shift")]
    return nodes, {"eps": np.array(1e-3),
                   "gamma": 1 + 0.2 * rng.standard_normal((1, channels, 1, 1)),
                   "beta": 0.2 * rng.standard_normal((1, channels, 1, 1))}


def _gelu():
    nodes = [helper.make_node("Div", ["c1", "root2"], ["g1"], name="gelu_div"),
             helper.make_node("Erf", ["g1"], ["g2"], name="gelu_erf"),
             helper.make_node("Add", ["g2", "one"], ["g3"], name="gelu_add"),
             helper.make_node("Mul", ["c1", "g3"], ["g4"], name="gelu_mul"),
             helper.make_node("Mul", ["g4", "half"], ["f"], name="gelu_half")]
    return nodes, {"root2": np.array(math.sqrt(2.0)), "one": np.array(1.0),
                   "half": np.array(0.5)}


@st.composite
def float_op_cnns(draw) -> onnx.ModelProto:
    """Conv -> one of ``FLOAT_OPS`` -> Conv on a 1x3xSxS image, 4 to 16 channels, S 6 to 12."""
    channels, side = draw(st.integers(4, 16)), draw(st.integers(6, 12))
    kind = draw(st.sampled_from(FLOAT_OPS))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if kind.startswith("elu"):
        middle, consts = _elu(kind == "elu_nhwc", draw(st.sampled_from([0.5, 1.0, 1.7])))
    elif kind == "channel_norm":
        middle, consts = _channel_norm(channels, rng)
    else:
        middle, consts = _gelu()
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="c1"),
             *middle,
             helper.make_node("Conv", ["f", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], name="c2")]
    inits = {"w1": rng.standard_normal((channels, 3, 3, 3)) / 3,
             "b1": 0.1 * rng.standard_normal(channels),
             "w2": rng.standard_normal((channels, channels, 3, 3)) / (3 * math.sqrt(channels)),
             "b2": 0.1 * rng.standard_normal(channels), **consts}
    shape = [1, channels, side, side]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k)
         for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
