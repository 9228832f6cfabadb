"""GELUs whose inner tensors a quantizer wraps in QDQ pairs: an FC, a GELU in one of the forms
exporters write, an FC, on tokens [1, T, C]. In the ``half_first`` forms (``(0.5 * x) * (1 +
erf)`` or ``tanh``) and ``half_then_x`` (``((1 + erf) * 0.5) * x``) onnxruntime's quantize_static
puts a pair after a Mul of the GELU that has an int8 form of its own (``rules/float_spans.py``)."""
from __future__ import annotations

import math
from typing import Dict, List

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder
from support.transformer_ops import gelu_erf, scalar, token_front

FORMS = ("erf:div", "erf:mul", "erf:half_first", "erf:half_then_x", "tanh:half_first",
         "tanh:pow")


def _tanh_gelu(b: Builder, x: str, half_first: bool) -> str:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3))), 0.5 * x first or last."""
    x3 = b.op("Pow", [x, scalar(b, 3.0)], name="cube")
    inner = b.op("Add", [x, b.op("Mul", [x3, scalar(b, 0.044715)], name="cubic")], name="inner")
    t = b.op("Tanh", [b.op("Mul", [inner, scalar(b, math.sqrt(2 / math.pi))], name="arg")],
             name="tanh")
    gate = b.op("Add", [t, scalar(b, 1.0)], name="one")
    if half_first:
        return b.op("Mul", [b.op("Mul", [x, scalar(b, 0.5)], name="half_x"), gate], name="gate")
    return b.op("Mul", [b.op("Mul", [x, gate], name="gate"), scalar(b, 0.5)], name="half")


def gelu_block(form: str, tokens: int = 8, channels: int = 16, seed: int = 1) -> onnx.ModelProto:
    """x [1, T, C] -> FC (identity) -> GELU in ``form`` (``FORMS``) -> FC (seeded weights)."""
    b = Builder(0)
    x = token_front(b, [1, tokens, channels])
    kind, spelling = form.split(":")
    y = (gelu_erf(b, x, spelling) if kind == "erf"
         else _tanh_gelu(b, x, spelling == "half_first"))
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((channels, channels)) / math.sqrt(channels)).astype(np.float32)
    return b.model([b.op("MatMul", [y, b.const(weight)], name="back")])


def token_feeds(count: int, seed: int, tokens: int = 8, channels: int = 16,
                spread: float = 2.0) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (spread * rng.standard_normal((1, tokens, channels))).astype(np.float32)}
            for _ in range(count)]


@st.composite
def gelu_blocks(draw):
    """(model, form, tokens, channels, activation type, spread of x) over ``FORMS``."""
    form = draw(st.sampled_from(FORMS))
    tokens, channels = draw(st.sampled_from([4, 8])), draw(st.sampled_from([8, 16, 24]))
    model = gelu_block(form, tokens, channels, seed=draw(st.integers(0, 2**16)))
    return (model, form, tokens, channels, draw(st.sampled_from(["QInt8", "QUInt8"])),
            draw(st.sampled_from([0.5, 2.0, 4.0])))
