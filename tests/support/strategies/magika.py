"""Norms in exporters' own spellings (frontend/norm_forms.py): tf's batchnorm formula
``x * s + (beta - m * s)`` over one axis of ``[1, T, H]`` (with or without gamma), and a
BatchNormalization whose mean and variance are computed from its input over every axis but 1
(variance as ``ReduceSumSquare / count`` or as a ``ReduceMean`` of squares), after an identity
FC (so the norm's input is the model's input, for the bound) on data whose mean may be large
next to its spread.

``norm_from_spec(spec)`` rebuilds a model and its feeds from the flat spec; ``norm_models()``
draws one; ``norm_bound(spec, x)`` is the module's stated float32 bound for that model."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel

SPELLINGS = ("formula", "bn_sum_squares", "bn_mean_squares")
EPS = 1e-3
U = 2.0 ** -24


class NormModel(GeneratedModel):
    rebuilt_by = "norm_from_spec"


def _params(spec: dict):
    rng = np.random.default_rng(spec["seed"] + 1)
    n = spec["shape"][spec["axis"]] if spec["spelling"] == "formula" else spec["shape"][1]
    gamma = (1 + 0.3 * rng.standard_normal(n)).astype(np.float32)
    beta = (0.5 * rng.standard_normal(n)).astype(np.float32)
    if not spec["gamma"]:
        gamma[:] = 1
    return gamma, beta


def _formula(b: Builder, x: str, spec: dict, gamma, beta) -> str:
    axis, shape = spec["axis"], spec["shape"]
    view = [n if i == axis else 1 for i, n in enumerate(shape)]
    mean = b.op("ReduceMean", [x], name="mean", axes=[axis], keepdims=1)
    d = b.op("Sub", [x, mean], name="centre")
    var = b.op("ReduceMean", [b.op("Mul", [d, d], name="sq")], name="var", axes=[axis],
               keepdims=1)
    r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(EPS))])])])
    s = b.op("Mul", [r, b.const(gamma.reshape(view))], name="scale") if spec["gamma"] else r
    shift = b.op("Sub", [b.const(beta.reshape(view)), b.op("Mul", [mean, s])])
    return b.op("Add", [b.op("Mul", [x, s]), shift], name="norm")


def _bn(b: Builder, x: str, spec: dict, gamma, beta) -> str:
    rank = len(spec["shape"])
    axes = [i for i in range(rank) if i != 1]
    mean = b.op("ReduceMean", [x], name="mean", axes=axes, keepdims=1)
    d = b.op("Sub", [x, mean], name="centre")
    count = float(np.prod([spec["shape"][i] for i in axes]))
    if spec["spelling"] == "bn_sum_squares":
        var = b.op("Div", [b.op("ReduceSumSquare", [d], axes=axes, keepdims=0),
                           b.const(np.float32(count))], name="var")
    else:
        var = b.op("ReduceMean", [b.op("Mul", [d, d])], name="var", axes=axes, keepdims=0)
    squeezed = b.op("Squeeze", [mean, b.const(np.array(axes, np.int64))])
    return b.op("BatchNormalization", [x, b.const(gamma), b.const(beta), squeezed, var],
                name="norm", epsilon=EPS)


def norm_from_spec(spec: dict) -> NormModel:
    b = Builder(seed=spec["seed"], opset=spec["opset"])
    shape = spec["shape"]
    x = b.op("MatMul", [b.input("x", shape), b.const(np.eye(shape[-1], dtype=np.float32))],
             name="front")
    gamma, beta = _params(spec)
    build = _formula if spec["spelling"] == "formula" else _bn
    model = b.model([build(b, x, spec, gamma, beta)])
    rng = np.random.default_rng(spec["seed"])
    feed = (rng.standard_normal(shape) * spec["spread"] + spec["offset"]).astype(np.float32)
    return NormModel(model, {"x": feed}, f"{spec['spelling']} norm of {shape}", spec)


def norm_bound(spec: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """frontend/norm_forms.py's float32 bound between the model and its rewrite."""
    gamma, beta = _params(spec)
    x64 = x.astype(np.float64)
    if spec["spelling"] == "formula":
        axis = spec["axis"]
        view = [n if i == axis else 1 for i, n in enumerate(x.shape)]
        m = x64.mean(axis=axis, keepdims=True)
        s = gamma.reshape(view) / np.sqrt(x64.var(axis=axis, keepdims=True) + EPS)
        return 8 * U * (np.abs(x64 * s) + np.abs(m * s) + np.abs(beta.reshape(view)))
    axes = tuple(i for i in range(x.ndim) if i != 1)
    count = int(np.prod([x.shape[i] for i in axes]))
    view = [1, x.shape[1]] + [1] * (x.ndim - 2)
    a = np.abs(gamma.reshape(view)) / np.sqrt(x64.var(axis=axes, keepdims=True) + EPS)
    big = np.abs(x64).max(axis=axes, keepdims=True)
    return (4 * count + 30) * U * big * a + 6 * U * np.abs(beta.reshape(view)) + 0 * y


@st.composite
def norm_models(draw) -> NormModel:
    spelling = draw(st.sampled_from(SPELLINGS))
    if spelling == "formula":
        shape = [1, draw(st.sampled_from([4, 12])), draw(st.sampled_from([8, 16]))]
        axis = draw(st.sampled_from([1, 2]))
    else:  # Keras' [N, C] rows as the channels of [1, N, C, 1], or a plain [1, C, H, W]
        shape = draw(st.sampled_from([[1, 1, 16, 1], [1, 3, 8, 1], [1, 4, 3, 5]]))
        axis = 1
    spec = {"seed": draw(st.integers(0, 2**16)), "opset": draw(st.sampled_from([13, 17])),
            "spelling": spelling, "shape": shape, "axis": axis, "gamma": draw(st.booleans()),
            "offset": draw(st.sampled_from([0.0, 5.0, 40.0])),
            "spread": draw(st.sampled_from([0.5, 2.0]))}
    return norm_from_spec(spec)
