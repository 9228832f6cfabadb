"""QDQ per-step Gemm heads whose product leaves the steps through a Q/DQ pair and then a
``Reshape [T, C] -> [1, T, C]`` (onnxruntime's MatMulAddFusion writes it) or an
``Unsqueeze(0)``, with or without a Softmax after, the closing tensor a graph output or not
(``frontend/sequence_lift.py``'s closing views). Scales are powers of two and the feeds on the
int8 grid, so onnxruntime's outputs before and after the lift are bit-equal."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper

from support.step_heads import joined_steps_model, quantized_steps_nodes


@dataclass
class ClosedHead:
    model: onnx.ModelProto
    feeds: Dict[str, np.ndarray]
    steps: int
    classes: int
    closing_is_output: bool


def _model(steps: int, dirs: int, width: int, classes: int, close: str, softmax: bool,
           closing_is_output: bool, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    s_in, s_w, s_out = 2.0 ** -4, 2.0 ** -5, 2.0 ** -6
    inits = {"yshape": np.array([steps, dirs, 1, width], np.int64),
             "fshape": np.array([steps, dirs * width], np.int64),
             "oshape": np.array([1, steps, classes], np.int64), "zero": np.array([0], np.int64),
             "s_in": np.float32(s_in), "s_w": np.float32(s_w), "s_b": np.float32(s_in * s_w),
             "s_out": np.float32(s_out), "z8": np.int8(0), "z32": np.int32(0),
             "wq": rng.integers(-127, 128, (dirs * width, classes)).astype(np.int8),
             "bq": rng.integers(-3000, 3000, classes).astype(np.int32)}
    make = helper.make_node
    closing = make("Reshape", ["out", "oshape"], ["o3"], name="close") if close == "reshape" \
        else make("Unsqueeze", ["out", "zero"], ["o3"], name="close")
    nodes: List[onnx.NodeProto] = quantized_steps_nodes() + [
        make("DequantizeLinear", ["wq", "s_w", "z8"], ["w"], name="w_dq"),
        make("DequantizeLinear", ["bq", "s_b", "z32"], ["b"], name="b_dq"),
        make("Gemm", ["fdq", "w", "b"], ["g"], name="head"),
        make("QuantizeLinear", ["g", "s_out", "z8"], ["gq"], name="out_q"),
        make("DequantizeLinear", ["gq", "s_out", "z8"], ["out"], name="out_dq"), closing]
    outputs = {"o3": [1, steps, classes]} if closing_is_output or not softmax else {}
    if softmax:
        nodes.append(make("Softmax", ["o3"], ["probs"], name="softmax", axis=-1))
        outputs["probs"] = [1, steps, classes]
    return joined_steps_model("closed_head", nodes, steps * dirs * width, outputs, inits)


@st.composite
def closed_heads(draw: st.DrawFn) -> ClosedHead:
    steps, dirs = draw(st.integers(2, 40)), draw(st.sampled_from([1, 2]))
    width, classes = draw(st.integers(1, 8)), draw(st.integers(1, 12))
    softmax, as_output = draw(st.booleans()), draw(st.booleans())
    model = _model(steps, dirs, width, classes, draw(st.sampled_from(["reshape", "unsqueeze"])),
                   softmax, as_output, draw(st.integers(0, 2 ** 16)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    joined = rng.integers(-127, 128, (1, steps * dirs * width, 1, 1)) * 2.0 ** -4
    return ClosedHead(model, {"joined": joined.astype(np.float32)}, steps, classes,
                      as_output or not softmax)
