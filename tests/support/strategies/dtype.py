"""Hypothesis strategies for the stored forms the dtype and opset passes take: a random CNN
(``cnn_models()``) stored in float16 as converters write it (``support/float16.py``: all
float16, or float16 weights Cast up to float), or written in opset 9 (onnx's version converter
down from 11, as an old exporter would have written it).

A ``StoredModel`` prints as the call that rebuilds it (``stored(from_spec(...), form)``), so a
falsifying example can be pasted into an ``@example`` as it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import version_converter

from support.float16 import as_float16, castup_weights, float32_twin
from support.strategies.cnn import cnn_models
from support.strategies.generated import GeneratedModel

FLOAT16_FORMS = ("float16", "castup")
OLD_OPSET = 9


@dataclass(repr=False)
class StoredModel:
    generated: GeneratedModel        # the float32 model drawn
    form: str                        # "float16" | "castup" | "opset9"
    model: Optional[onnx.ModelProto]  # the stored form; None: the version converter refused
    feeds: Dict[str, np.ndarray]     # the drawn feeds, in the stored form's input dtypes

    def __repr__(self) -> str:
        return f"stored({self.generated!r}, {self.form!r})"

    @property
    def twin(self) -> onnx.ModelProto:
        """What the stored form computes in float32: the drawn model, float16 weights' values."""
        if self.form == "opset9":
            return self.generated.model
        return float32_twin(self.generated.model)


def stored(generated: GeneratedModel, form: str) -> StoredModel:
    """``generated`` stored in ``form``."""
    feeds = dict(generated.feeds)
    if form == "float16":
        feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v
                 for k, v in feeds.items()}
        return StoredModel(generated, form, as_float16(generated.model), feeds)
    if form == "castup":
        return StoredModel(generated, form, castup_weights(generated.model), feeds)
    try:
        old = version_converter.convert_version(generated.model, OLD_OPSET)
        onnx.checker.check_model(old)
    except Exception:  # no down-adapter for one of its ops: nothing to draw here
        old = None
    return StoredModel(generated, form, old, feeds)


@st.composite
def float16_models(draw) -> StoredModel:
    """A random CNN stored in float16 (all of it, or weights Cast up)."""
    generated = draw(cnn_models(max_blocks=4))
    return stored(generated, draw(st.sampled_from(FLOAT16_FORMS), label="float16 form"))


@st.composite
def opset9_models(draw) -> StoredModel:
    """A random opset-11 CNN written in opset 9 (``model`` None where onnx cannot)."""
    return stored(draw(cnn_models(max_blocks=4, opsets=(11,))), "opset9")
