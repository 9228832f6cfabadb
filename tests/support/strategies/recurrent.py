"""Random recurrent cells (frontend/recurrent_unroll.py): LSTM, GRU (either
``linear_before_reset``) or RNN, forward, reverse or bidirectional, 1 to 12 steps, batch 1 or
2, with or without B, initial states as inputs, constants or none, any non-empty set of the
outputs used, layout 0 or 1.

``recurrent_cells()`` draws a spec (a flat JSON-able dict); ``recurrent_from_spec(spec)``
builds the model (``support/recurrent.py``'s ``cell_model``) and its feeds from it alone, so a
falsifying example hypothesis prints can be pasted into an ``@example`` as it is.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.recurrent import cell_model
from support.strategies.generated import GeneratedModel


class RecurrentCell(GeneratedModel):
    rebuilt_by = "recurrent_from_spec"


@st.composite
def recurrent_cells(draw, layouts=(0, 1), batches=(1, 2), steps: int = 12) -> RecurrentCell:
    op = draw(st.sampled_from(["LSTM", "GRU", "RNN"]))
    outputs = draw(st.lists(st.booleans(), min_size=3 if op == "LSTM" else 2,
                            max_size=3 if op == "LSTM" else 2).filter(any))
    spec = {"op": op, "direction": draw(st.sampled_from(["forward", "reverse",
                                                         "bidirectional"])),
            "steps": draw(st.integers(1, steps)), "batch": draw(st.sampled_from(batches)),
            "width": draw(st.integers(1, 6)), "hidden": draw(st.integers(1, 6)),
            "bias": draw(st.booleans()), "states": draw(st.sampled_from(["none", "inputs",
                                                                         "constants"])),
            "outputs": outputs, "lbr": draw(st.integers(0, 1)) if op == "GRU" else 0,
            "layout": draw(st.sampled_from(layouts)), "seed": draw(st.integers(0, 2 ** 16))}
    return recurrent_from_spec(spec)


def recurrent_from_spec(spec: dict) -> RecurrentCell:
    model = cell_model(**spec)
    rng = np.random.default_rng(spec["seed"] + 1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]
                                         ).astype(np.float32) for i in model.graph.input}
    return RecurrentCell(model=model, feeds=feeds, description=f"{spec['op']} cell", spec=spec)
