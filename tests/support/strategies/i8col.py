"""QDQ per-step heads on ``[T, 1, C]`` after an unrolled cell's joined steps
(``frontend/int8_step_rows.py``): T, the directions, widths, an int8 bias Add or none, its
operand order, whether the tail's float tensor is a graph output, a Softmax after or not. Scales
are powers of two and the feeds on the input's int8 grid, so onnxruntime's sums are exact and
the model before and after the rewrite must agree bit for bit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper

from support.step_heads import joined_steps_model, quantized_steps_nodes


@dataclass
class HeadCase:
    model: onnx.ModelProto
    feeds: Dict[str, np.ndarray]
    steps: int
    width: int  # the head's input C (D K)


def _tail(bias: str, softmax: bool) -> Tuple[List[onnx.NodeProto], str]:
    make = helper.make_node
    nodes = [make("QuantizeLinear", ["m", "s_out", "z8"], ["mq"], name="m_q"),
             make("DequantizeLinear", ["mq", "s_out", "z8"], ["mdq"], name="m_dq")]
    last = "mdq"
    if bias != "none":
        pair = ["bias", "mdq"] if bias == "first" else ["mdq", "bias"]
        nodes += [make("DequantizeLinear", ["bq", "s_out", "z8"], ["bias"], name="b_dq"),
                  make("Add", pair, ["scores"], name="head_bias"),
                  make("QuantizeLinear", ["scores", "s_out", "z8"], ["sq"], name="s_q"),
                  make("DequantizeLinear", ["sq", "s_out", "z8"], ["logits"], name="s_dq")]
        last = "logits"
    if softmax:
        nodes.append(make("Softmax", [last], ["out"], name="probs", axis=2))
    return nodes, ("out" if softmax else last)


@st.composite
def int8_unit_axis_heads(draw) -> HeadCase:
    steps, dirs = draw(st.integers(2, 40)), draw(st.sampled_from([1, 2]))
    k, classes = draw(st.integers(1, 12)), draw(st.integers(1, 9))
    bias, softmax = draw(st.sampled_from(["none", "first", "second"])), draw(st.booleans())
    also_out = draw(st.booleans())  # the tail's float tensor is a graph output too
    seed = draw(st.integers(0, 2 ** 16))
    rng, c = np.random.default_rng(seed), dirs * k
    inits = {"yshape": np.array([steps, dirs, 1, k], np.int64),
             "fshape": np.array([steps, 1, c], np.int64), "s_in": np.float32(2.0 ** -4),
             "s_w": np.float32(2.0 ** -5), "s_out": np.float32(2.0 ** -6), "z8": np.int8(0),
             "wq": rng.integers(-127, 128, (c, classes)).astype(np.int8),
             "bq": rng.integers(-64, 64, classes).astype(np.int8)}
    tail, out = _tail(bias, softmax)
    nodes = quantized_steps_nodes() + [
        helper.make_node("DequantizeLinear", ["wq", "s_w", "z8"], ["w"], name="w_dq"),
        helper.make_node("MatMul", ["fdq", "w"], ["m"], name="head")] + tail
    outputs = {out: [steps, 1, classes]}
    if also_out and softmax:
        outputs[tail[-2].output[0]] = [steps, 1, classes]
    model = joined_steps_model("fuzz_head", nodes, steps * c, outputs, inits)
    x = (rng.integers(-127, 128, (1, steps * c, 1, 1)) * 2.0 ** -4).astype(np.float32)
    return HeadCase(model, {"joined": x}, steps, c)
