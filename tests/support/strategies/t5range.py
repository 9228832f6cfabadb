"""Norm encoders whose squares overflow fp16 (frontend/norm_range.py): the RMSNorm spellings of
``norms.py`` at an input scale that makes the squares exceed 65504, and ``norm_range``'s own
small models (T5, Reciprocal, LayerNorm) at a drawn weight scale, with a drawn exponent k."""
from __future__ import annotations

from hypothesis import strategies as st

from support.norm_models import FORMS
from support.strategies.norms import rmsnorm_models


def overflowing_encoders() -> st.SearchStrategy:
    """``norms.py``'s RMSNorm encoders with the input scaled to 400-1000 (squares to ~1e6)."""
    return st.sampled_from([400.0, 1000.0]).flatmap(lambda s: rmsnorm_models(scale=s))


@st.composite
def scaled_norm_specs(draw) -> dict:
    """A small norm model's arguments and an exponent: ``norm_models.norm_model(form,
    weight_scale, seed)`` scaled by ``2**-k``."""
    return {"form": draw(st.sampled_from(FORMS)),
            "weight_scale": draw(st.sampled_from([0.01, 1.0, 250.0, 3000.0])),
            "seed": draw(st.integers(0, 2**16)), "k": draw(st.integers(1, 30)),
            "input_seed": draw(st.integers(0, 2**16))}
