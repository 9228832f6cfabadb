"""Models with a per-step head after a recurrent cell over T steps above the device's batch
(``support/step_heads.py``): any cell, direction, head form (a Squeeze, a CRNN's Transpose and
Reshape, a Gemm over ``[T, C]``) and size. Each must fit one device with its head at batch 1
(``frontend/step_heads.py``).

``step_head_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a
falsifying example prints as that call); ``step_head_models()`` draws one.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.step_heads import HEADS, step_head_model
from support.strategies.generated import GeneratedModel


class StepHeadModel(GeneratedModel):
    rebuilt_by = "step_head_from_spec"


def step_head_from_spec(spec: dict) -> StepHeadModel:
    model = step_head_model(spec["cell"], spec["head"], steps=spec["steps"],
                            hidden=spec["hidden"], classes=spec["classes"],
                            direction=spec["direction"], rows=spec["rows"], seed=spec["seed"])
    rng = np.random.default_rng(spec["seed"])
    feeds = {"image": rng.standard_normal((1, 3, spec["rows"], spec["steps"])
                                          ).astype(np.float32)}
    return StepHeadModel(model, feeds, f"{spec['cell']} over {spec['steps']} steps, "
                                       f"{spec['head']} head", spec)


@st.composite
def step_head_models(draw) -> StepHeadModel:
    head = draw(st.sampled_from(HEADS))
    directions = ("forward", "reverse") if head == "squeeze" else (
        "forward", "reverse", "bidirectional")
    spec = {"cell": draw(st.sampled_from(("LSTM", "GRU", "RNN"))), "head": head,
            "direction": draw(st.sampled_from(directions)), "steps": draw(st.integers(9, 40)),
            "hidden": draw(st.integers(2, 10)), "classes": draw(st.integers(2, 6)),
            "rows": draw(st.integers(1, 3)), "seed": draw(st.integers(0, 2**16))}
    return step_head_from_spec(spec)
