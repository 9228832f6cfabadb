"""Strategies for ``foreign_dynamic_ops.py``: onnxruntime's dynamic int8 Conv chains
(``support/dynamic_int8.conv_integer_model``: kernel, stride, padding, per-tensor or
per-output-channel scale, no bias, a float bias or the run-time integer bias), onnxruntime's
fused dynamic MatMuls, and float LSTMs for ``quantize_dynamic`` to make DynamicQuantizeLSTMs."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx
from hypothesis import strategies as st

from support.dynamic_int8 import conv_integer_model, float_lstm, fused_matmul_model


@st.composite
def conv_integer_chains(draw) -> Tuple[onnx.ModelProto, np.ndarray, float, bool]:
    """(model, its float weight, the largest weight scale, whether its bias is the run-time
    integer one)."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    outs, ins, kernel = draw(st.integers(1, 6)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    pad, stride = draw(st.integers(0, kernel - 1)), draw(st.integers(1, 2))
    weight = rng.integers(0, 256, (outs, ins, kernel, kernel))
    zero = np.array(draw(st.integers(0, 255)))  # onnxruntime's ConvInteger: per tensor only
    scale = (rng.random(outs) * 0.02 + 1e-3) if draw(st.booleans()) else np.array(0.01)
    bias_form = draw(st.sampled_from(["none", "float", "integer"]))
    bias = None if bias_form == "none" else rng.standard_normal(outs).astype(np.float32)
    model = conv_integer_model(weight, zero, scale, bias, integer_bias=bias_form == "integer",
                               size=draw(st.integers(max(kernel, 2), 7)), pads=[pad] * 4,
                               strides=[stride] * 2)
    shaped = np.reshape(scale, (-1, 1, 1, 1)).astype(np.float32)
    return model, (weight - zero) * shaped, float(np.max(scale)), bias_form == "integer"


@st.composite
def float_lstms(draw) -> Tuple[onnx.ModelProto, bool]:
    """(a float LSTM of one step, whether quantize_dynamic should quantize it per channel)."""
    model = float_lstm(draw(st.integers(0, 2 ** 16)), 1, draw(st.integers(2, 12)),
                       draw(st.integers(1, 24)),
                       draw(st.sampled_from(["forward", "reverse", "bidirectional"])),
                       batch=draw(st.integers(1, 2)))
    return model, draw(st.booleans())


@st.composite
def fused_matmuls(draw) -> Tuple[onnx.ModelProto, np.ndarray]:
    """(a DynamicQuantizeMatMul or MatMulIntegerToFloat model, its float weight)."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    rows, columns = draw(st.integers(2, 40)), draw(st.integers(1, 9))
    weight = rng.integers(-127, 128, (rows, columns))
    per_column = draw(st.booleans())
    zero = rng.integers(-5, 6, columns) if per_column else np.array(draw(st.integers(-5, 5)))
    scale = rng.random(columns) * 0.02 + 1e-3 if per_column else np.array(0.01)
    bias = rng.standard_normal(columns).astype(np.float32) if draw(st.booleans()) else None
    op = draw(st.sampled_from(["DynamicQuantizeMatMul", "MatMulIntegerToFloat"]))
    return fused_matmul_model(op, weight, zero, scale, bias), (weight - zero) * np.float32(scale)
