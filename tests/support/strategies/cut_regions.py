"""Layout round trips as exporters write them (``frontend/round_trips.py``): a Relu, then
Transpose(p), maybe a Reshape to the shape it has, maybe an int8 model's per-tensor Q/DQ pair
after each move, then Transpose(q), then a Relu; q the inverse of p (a round trip) or any other
permutation, on a rank 3 or 4 tensor with unit axes and a batch of 1 to 4.

``round_trip_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a
falsifying example prints as that call); ``round_trip_models()`` draws one.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel


class RoundTripModel(GeneratedModel):
    rebuilt_by = "round_trip_from_spec"

    @property
    def is_round_trip(self) -> bool:
        first, second = self.spec["first"], self.spec["second"]
        return [first[a] for a in second] == list(range(len(first)))


def _pair(b: Builder, y: str) -> str:
    scale, zero = b.const(np.float32(0.03)), b.const(np.int8(0))
    return b.op("DequantizeLinear", [b.op("QuantizeLinear", [y, scale, zero]), scale, zero])


def round_trip_from_spec(spec: dict) -> RoundTripModel:
    b = Builder(seed=spec["seed"], opset=13)
    step = (lambda y: _pair(b, y)) if spec["int8"] else (lambda y: y)
    shape = spec["shape"]
    y = b.op("Relu", [b.input("x", shape)], name="before")
    y = step(b.op("Transpose", [y], perm=spec["first"], name="out_of_place"))
    if spec["reshape"]:
        moved = [shape[a] for a in spec["first"]]
        y = step(b.op("Reshape", [y, b.const(np.array(moved, np.int64))], name="same_shape"))
    y = b.op("Transpose", [y], perm=spec["second"], name="back")
    feeds = {"x": np.random.default_rng(spec["seed"]).standard_normal(shape).astype(np.float32)}
    return RoundTripModel(model=b.model([b.op("Relu", [y], name="after")]), feeds=feeds,
                          description=str(spec), spec=spec)


@st.composite
def round_trip_models(draw) -> RoundTripModel:
    rank = draw(st.sampled_from([3, 4]))
    shape = [draw(st.sampled_from([1, 2, 4]))] + [
        draw(st.sampled_from([1, 1, 3, 5])) for _ in range(rank - 1)]
    first = draw(st.permutations(range(rank)))
    inverse = [int(a) for a in np.argsort(first)]
    second = draw(st.one_of(st.just(inverse), st.permutations(range(rank))))
    spec = {"seed": draw(st.integers(0, 2**16)), "shape": shape, "first": list(first),
            "second": list(second), "reshape": draw(st.booleans()),
            "int8": draw(st.booleans())}
    return round_trip_from_spec(spec)
