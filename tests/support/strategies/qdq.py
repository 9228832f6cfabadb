"""Hypothesis strategy of QDQ (int8) models: random CNNs quantized with Marvell's recipe."""
from __future__ import annotations

from hypothesis import strategies as st

from support.strategies.cnn import cnn_models
from support.strategies.generated import GeneratedModel, quantized


@st.composite
def qdq_models(draw, max_blocks: int = 4) -> GeneratedModel:
    """Random CNNs (``cnn_models`` without CPU-only ops, extra inputs or a dynamic batch,
    opset 13+) quantized by ``quantized``: QDQ models as Marvell's recipe writes them."""
    gm = draw(cnn_models(max_blocks=max_blocks, opsets=(13, 17), multi_io=False,
                         cpu_ops=False).filter(lambda g: g.shapes is None))
    from hypothesis import assume

    from mrvl_convert import MrvlConvertError

    method = draw(st.sampled_from(["minmax", "minmax", "percentile"]), label="calibration")
    try:
        return quantized(gm, samples=draw(st.integers(1, 4), label="calibration batches"),
                         method=method)
    except MrvlConvertError:  # quantize_static refuses it (e.g. percentile, nothing to quantize)
        assume(False)
        raise
