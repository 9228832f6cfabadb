"""RMSNorm encoders as exporters write them (issue 45 finding 6, frontend/rsqrt_forms.py): T5's
``x * Div(1, Sqrt(ReduceMean(Pow(x, 2)) + eps))``, ``Reciprocal(Sqrt(..))``,
``Mul(x, Pow(v, -0.5))``, ``Div(x, Pow(v, 0.5))`` and ``Div(x, Sqrt(..))``, the square written
``Pow(x, 2)`` or ``Mul(x, x)``, between the FCs of a pre-norm block (norm, FC, Relu, FC,
residual) repeated ``blocks`` times, a final norm last.

``norms_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a falsifying
example prints as that call); ``rmsnorm_models()`` draws one. ``scale`` multiplies the input:
with ``scale`` 400 the squares (up to ~1e6) exceed fp16's 65504, the T5 overflow.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel

SPELLINGS = ("div_one", "reciprocal", "pow_neg_half", "div_pow_half", "div_x")


class NormModel(GeneratedModel):
    rebuilt_by = "norms_from_spec"


def _scalar(b: Builder, value: float) -> str:
    return b.const(np.array(value, np.float32))


def rms_norm(b: Builder, x: str, spec: dict, name: str) -> str:
    """``x * rsqrt(mean(x**2) + eps) * weight`` in the spelling ``spec["norm"]``."""
    c, form = spec["channels"], spec["norm"]
    square = (b.op("Pow", [x, _scalar(b, 2.0)], name=f"{name}_pow") if spec["pow2"]
              else b.op("Mul", [x, x], name=f"{name}_pow"))
    mean = b.op("ReduceMean", [square], name=f"{name}_mean", axes=[-1], keepdims=1)
    v = b.op("Add", [mean, _scalar(b, spec["eps"])], name=f"{name}_eps")
    if form == "pow_neg_half":
        normed = b.op("Mul", [x, b.op("Pow", [v, _scalar(b, -0.5)], name=f"{name}_rsqrt")],
                      name=f"{name}_scaled")
    elif form == "div_pow_half":
        normed = b.op("Div", [x, b.op("Pow", [v, _scalar(b, 0.5)], name=f"{name}_sqrt")],
                      name=f"{name}_scaled")
    else:
        s = b.op("Sqrt", [v], name=f"{name}_sqrt")
        if form == "div_x":
            normed = b.op("Div", [x, s], name=f"{name}_scaled")
        else:
            r = (b.op("Div", [_scalar(b, 1.0), s], name=f"{name}_rsqrt") if form == "div_one"
                 else b.op("Reciprocal", [s], name=f"{name}_rsqrt"))
            normed = b.op("Mul", [x, r], name=f"{name}_scaled")
    weight = b.const((1 + 0.1 * b.rng.standard_normal(c)).astype(np.float32))
    return b.op("Mul", [weight, normed], name=f"{name}_weight")


def norms_from_spec(spec: dict) -> NormModel:
    t, c = spec["tokens"], spec["channels"]
    b = Builder(seed=spec["seed"], opset=spec["opset"])
    x = b.input("x", [1, t, c])
    for k in range(spec["blocks"]):
        y = rms_norm(b, x, spec, f"norm{k}")
        y = b.op("Relu", [b.op("MatMul", [y, b.weight(c, 2 * c)], name=f"wi{k}")],
                 name=f"act{k}")
        y = b.op("MatMul", [y, b.weight(2 * c, c, scale=0.1)], name=f"wo{k}")
        x = b.op("Add", [x, y], name=f"residual{k}")
    model = b.model([rms_norm(b, x, spec, "final")])
    rng = np.random.default_rng(spec["seed"] + 1)
    feeds = {"x": (rng.standard_normal((1, t, c)) * spec["scale"]).astype(np.float32)}
    return NormModel(model, feeds, f"RMSNorm encoder, {spec['blocks']} blocks, norm "
                     f"{spec['norm']}, x scaled {spec['scale']}", spec)


@st.composite
def rmsnorm_models(draw, scale: float = 1.0) -> NormModel:
    spec = {"seed": draw(st.integers(0, 2**16)), "opset": draw(st.sampled_from([13, 17])),
            "tokens": draw(st.sampled_from([4, 8, 16])),
            "channels": draw(st.sampled_from([8, 16, 32])),
            "blocks": draw(st.integers(1, 2)), "norm": draw(st.sampled_from(SPELLINGS)),
            "pow2": draw(st.booleans()), "eps": draw(st.sampled_from([1e-6, 1e-5])),
            "scale": scale}
    return norms_from_spec(spec)


@st.composite
def powers(draw) -> GeneratedModel:
    """One ``Pow(x, e)`` (e in 2, 0.5, -0.5) or ``Div(c, Sqrt(x))`` of a positive input, its
    magnitudes over many binades (the rewrites' bounds are relative)."""
    form = draw(st.sampled_from(["pow2", "pow_half", "pow_neg_half", "div_one", "div_const"]))
    shape = [1, draw(st.integers(1, 6)), draw(st.integers(1, 8))]
    b = Builder(seed=0, opset=13)
    x = b.input("x", shape)
    if form.startswith("div"):
        c = 1.0 if form == "div_one" else draw(st.floats(-1e3, 1e3, width=32))
        y = b.op("Div", [_scalar(b, c), b.op("Sqrt", [x], name="sqrt")], name="form")
    else:
        e = {"pow2": 2.0, "pow_half": 0.5, "pow_neg_half": -0.5}[form]
        y = b.op("Pow", [x, _scalar(b, e)], name="form")
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    feeds = {"x": (rng.random(shape) * 10.0 ** rng.integers(-30, 30, shape)).astype(np.float32)}
    return GeneratedModel(b.model([y]), feeds, f"{form} of {shape}, seed {seed}")


@st.composite
def global_max_models(draw) -> GeneratedModel:
    """A global max over H and W as keras2onnx (NHWC Transpose, axes [1, 2], dropped) or torch
    (axes [2, 3], kept or dropped) writes it, of a 4-D activation (frontend/global_max.py)."""
    keras = draw(st.booleans())
    keepdims = 0 if keras else draw(st.integers(0, 1))
    shape = [1, draw(st.integers(1, 6)), draw(st.integers(1, 7)), draw(st.integers(1, 7))]
    b = Builder(seed=0, opset=draw(st.sampled_from([11, 13])))
    y = b.op("Relu", [b.input("x", shape)])
    if keras:
        y = b.op("Transpose", [y], perm=[0, 2, 3, 1])
    y = b.op("ReduceMax", [y], name="pool", axes=[1, 2] if keras else [2, 3], keepdims=keepdims)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    feeds = {"x": (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape))
             .astype(np.float32)}
    return GeneratedModel(b.model([y]), feeds, f"global max, keras {keras}, {shape}")
