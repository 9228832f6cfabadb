"""Transformer blocks' LayerNorm and GELU in the forms exporters write, on a token tensor
[1, T, C] behind an exact identity FC (so the region is compute-heavy and the block gets its
input as fed): builders for tests/layers/test_layer_norm.py and test_gelu.py."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from support.models import Builder

SQRT2 = np.float32(math.sqrt(2.0))


def token_front(b: Builder, shape: Sequence[int]) -> str:
    """x [1, T, C] -> MatMul by the identity: exact, and an FC layer in front."""
    c = shape[-1]
    return b.op("MatMul", [b.input("x", shape), b.const(np.eye(c, dtype=np.float32))],
                name="front")


def scalar(b: Builder, value: float) -> str:
    return b.const(np.array(value, np.float32))


def layer_norm_decomposed(b: Builder, x: str, c: int, square: str = "pow",
                          divide: str = "div") -> str:
    """ReduceMean, Sub, Pow 2 (or Mul(d, d)), ReduceMean, Add eps, Sqrt, Div (or Reciprocal and
    Mul), Mul gamma, Add beta: how torch and tf2onnx write a LayerNorm before opset 17."""
    mean = b.op("ReduceMean", [x], name="mean", axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean], name="centre")
    sq = (b.op("Pow", [d, scalar(b, 2.0)], name="square") if square == "pow"
          else b.op("Mul", [d, d], name="square"))
    var = b.op("ReduceMean", [sq], name="var", axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, scalar(b, 1e-5)], name="eps")], name="std")
    if divide == "div":
        n = b.op("Div", [d, std], name="normed")
    else:
        n = b.op("Mul", [d, b.op("Reciprocal", [std], name="inv")], name="normed")
    gamma = b.const(np.linspace(0.5, 1.5, c).astype(np.float32))
    beta = b.const(np.linspace(-0.25, 0.25, c).astype(np.float32))
    return b.op("Add", [b.op("Mul", [n, gamma], name="gamma"), beta], name="beta")


def layer_norm_op(b: Builder, x: str, c: int, bias: bool = True, **attrs) -> str:
    """The opset-17 LayerNormalization op."""
    ins = [x, b.const(np.linspace(0.5, 1.5, c).astype(np.float32))]
    if bias:
        ins.append(b.const(np.linspace(-0.25, 0.25, c).astype(np.float32)))
    return b.op("LayerNormalization", ins, name="ln", **attrs)


def gelu_erf(b: Builder, x: str, form: str = "div") -> str:
    """torch's GELU export (``div``) and its variants: ``mul`` (x * 1/sqrt 2), ``half_first``
    (0.5 * x computed first, one Mul by it), ``half_then_x`` (Mul 0.5 then Mul x)."""
    if form == "mul":
        scaled = b.op("Mul", [x, scalar(b, 1.0 / math.sqrt(2.0))], name="scale")
    else:
        scaled = b.op("Div", [x, b.const(SQRT2)], name="scale")
    gate = b.op("Add", [b.op("Erf", [scaled], name="erf"), scalar(b, 1.0)], name="one")
    if form == "half_first":
        half_x = b.op("Mul", [x, scalar(b, 0.5)], name="half_x")
        return b.op("Mul", [half_x, gate], name="gate")
    if form == "half_then_x":
        return b.op("Mul", [b.op("Mul", [gate, scalar(b, 0.5)], name="gate"), x], name="half")
    return b.op("Mul", [b.op("Mul", [x, gate], name="gate"), scalar(b, 0.5)], name="half")


def gelu_tanh(b: Builder, x: str, cube: str = "pow") -> str:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))), x**3 as Pow 3 or x * x * x."""
    x3 = (b.op("Pow", [x, scalar(b, 3.0)], name="cube") if cube == "pow"
          else b.op("Mul", [b.op("Mul", [x, x], name="square"), x], name="cube"))
    inner = b.op("Add", [x, b.op("Mul", [x3, scalar(b, 0.044715)], name="cubic")], name="inner")
    t = b.op("Tanh", [b.op("Mul", [inner, scalar(b, math.sqrt(2 / math.pi))], name="arg")],
             name="tanh")
    gate = b.op("Add", [t, scalar(b, 1.0)], name="one")
    return b.op("Mul", [b.op("Mul", [x, gate], name="gate"), scalar(b, 0.5)], name="half")
