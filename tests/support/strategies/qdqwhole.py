"""Hypothesis strategy of QDQ transformer blocks from another quantizer: one pre-norm encoder
block (LayerNorm decomposed or the opset-17 op, attention, Erf GELU MLP) of drawn width, heads
and tokens, quantized by onnxruntime's ``quantize_static`` per-tensor or per-channel with int8 or
uint8 activations (issue 45: a QDQ transformer stays as whole as its float twin,
``frontend/float_pairs.py``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import numpy as np
import onnx
from hypothesis import strategies as st

from support.corpus_transformer import Tokens
from support.foreign_qdq import foreign_quantized


@dataclass
class QdqBlock:
    twin: onnx.ModelProto
    qdq: onnx.ModelProto
    feeds: List[Dict[str, np.ndarray]]
    description: str


@st.composite
def qdq_blocks(draw) -> QdqBlock:
    seed = draw(st.integers(0, 2 ** 16))
    heads = draw(st.sampled_from([1, 2, 4]))
    channels = heads * draw(st.sampled_from([8, 12, 16]))
    tokens = draw(st.integers(2, 12))
    ln = draw(st.sampled_from(["decomposed", "op"]))
    per_channel = draw(st.booleans())
    activation = draw(st.sampled_from(["QInt8", "QUInt8"]))
    t = Tokens(seed, opset=17 if ln == "op" else 13)
    y = t.b.input("tokens", [1, tokens, channels])
    twin = t.model(t.encoder(y, channels, heads, ln), [1, tokens, channels], "block")
    rng = np.random.default_rng(seed)
    feeds = [{"tokens": rng.standard_normal((1, tokens, channels)).astype(np.float32)}
             for _ in range(10)]
    qdq = foreign_quantized(twin, per_channel=per_channel, activation=activation,
                            feeds=feeds[:8])
    return QdqBlock(twin, qdq, feeds[8:], f"seed {seed}, C {channels}, heads {heads}, "
                    f"T {tokens}, LayerNorm {ln}, per-channel {per_channel}, {activation}")
