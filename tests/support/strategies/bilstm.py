"""Outer sums as additive attention writes them (frontend/outer_sums.py): ``Add`` of a
``[1, 1, H, W]`` activation and a ``[1, C, h, w]`` one (``h``, ``w`` each 1 or the output's,
not both full), in either order, each operand a Relu of its own input (activations, as the
attention's projections are).

``outer_sum_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a
falsifying example prints as that call); ``outer_sum_models()`` draws one.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel


class OuterSumModel(GeneratedModel):
    rebuilt_by = "outer_sum_from_spec"


def outer_sum_from_spec(spec: dict) -> OuterSumModel:
    c, h, w = spec["channels"], spec["height"], spec["width"]
    a_shape = [1, c, h if spec["a_rows"] else 1, w if spec["a_cols"] else 1]
    b_shape = [1, 1, h, w]
    b = Builder(seed=spec["seed"], opset=14)
    a_in, b_in = b.input("a", a_shape), b.input("b", b_shape)
    ra, rb = b.op("Relu", [a_in]), b.op("Relu", [b_in])
    pair = [rb, ra] if spec["one_channel_first"] else [ra, rb]
    model = b.model([b.op("Add", pair, name="outer_sum")])
    rng = np.random.default_rng(spec["seed"])
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32),
             "b": rng.standard_normal(b_shape).astype(np.float32)}
    return OuterSumModel(model, feeds, f"outer sum {a_shape} + {b_shape}", spec)


@st.composite
def outer_sum_models(draw) -> OuterSumModel:
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    a_rows, a_cols = draw(st.booleans()), draw(st.booleans())
    # a of the output's shape is a one-way broadcast, not this form: a keeps a unit row axis
    if (a_rows or h == 1) and (a_cols or w == 1):
        a_rows, h = False, max(h, 2)
    spec = {"channels": draw(st.integers(2, 6)), "height": h, "width": w, "a_rows": a_rows,
            "a_cols": a_cols, "one_channel_first": draw(st.booleans()),
            "seed": draw(st.integers(0, 2 ** 16))}
    return outer_sum_from_spec(spec)
