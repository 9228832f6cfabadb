"""Random Conv backbones in front of a Loop whose body defeats onnx's strict shape inference
(tests/support/loop_decoder.py, slanet-plus's form; frontend/shape_failures.py): channels,
image size, the Loop's stop threshold and step limit, the weights' seed, and a tail after the
Loop whose shape onnxruntime tells or none.

``loop_models()`` draws a spec (a flat JSON-able dict); ``loop_from_spec(spec)`` builds the
model and its feeds from it alone, so a falsifying example can be pasted into an ``@example``.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.loop_decoder import loop_decoder
from support.strategies.generated import GeneratedModel


class LoopModel(GeneratedModel):
    rebuilt_by = "loop_from_spec"


@st.composite
def loop_models(draw) -> LoopModel:
    spec = {"channels": draw(st.integers(1, 6)), "size": draw(st.integers(3, 10)),
            "threshold": draw(st.sampled_from([0.01, 0.05, 0.2])),
            "max_steps": draw(st.integers(1, 12)), "seed": draw(st.integers(0, 2**16)),
            "tail": draw(st.booleans())}
    return loop_from_spec(spec)


def loop_from_spec(spec: dict) -> LoopModel:
    model = loop_decoder(spec["channels"], spec["size"], spec["threshold"], spec["max_steps"],
                         spec["seed"], tail=spec["tail"])
    rng = np.random.default_rng(spec["seed"])
    feeds = {"x": rng.random((1, 3, spec["size"], spec["size"]), dtype=np.float32)}
    return LoopModel(model, feeds, f"loop decoder {spec}", spec)
