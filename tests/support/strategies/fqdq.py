"""Hypothesis strategy of QDQ models from other quantizers: random CNNs through onnxruntime's
``quantize_static`` with per-channel int8 weights or per-tensor, and uint8 or asymmetric int8
activations (zero points), as onnxruntime's own recipes write them (issue 45, finding 5)."""
from __future__ import annotations

from hypothesis import strategies as st

from support.foreign_qdq import foreign_quantized
from support.strategies.cnn import cnn_models
from support.strategies.generated import GeneratedModel


@st.composite
def foreign_qdq_models(draw, max_blocks: int = 3) -> GeneratedModel:
    """A random CNN (no CPU-only ops, one input, opset 13+: per-channel QDQ needs 13) quantized
    with ``quantize_static``: per-channel or per-tensor weights, QUInt8 or QInt8 activations
    (asymmetric: zero points), calibrated on its own feeds and seeded normals."""
    import numpy as np
    from hypothesis import assume

    gm = draw(cnn_models(max_blocks=max_blocks, opsets=(13, 17), multi_io=False,
                         cpu_ops=False).filter(lambda g: g.shapes is None))
    per_channel = draw(st.booleans(), label="per-channel weights")
    activation = draw(st.sampled_from(["QUInt8", "QInt8"]), label="activation type")
    rng = np.random.default_rng(draw(st.integers(0, 2**16), label="calibration seed"))
    feeds = [gm.feeds] + [{k: rng.standard_normal(v.shape).astype(v.dtype)
                           for k, v in gm.feeds.items()} for _ in range(3)]
    try:
        model = foreign_quantized(gm.model, per_channel=per_channel, activation=activation,
                                  feeds=feeds)
    except (ValueError, RuntimeError):  # quantize_static refuses it: not this test's subject
        assume(False)
        raise
    return GeneratedModel(model, gm.feeds, f"{gm.description}\nquantize_static: per_channel="
                          f"{per_channel}, activation {activation}")
