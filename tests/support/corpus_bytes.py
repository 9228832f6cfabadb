"""Token models as jax2tf (through tf2onnx) and PyTorch's BatchNorm1d write them: the spellings
of issue 38's byte-level classifier and SVTR block (seeded random weights, batch 1).

- ``byte_classifier``: int32 byte ids [1, T]; one-hot as jax2tf writes ``jax.nn.one_hot``
  (Unsqueeze the ids, ``Equal`` against a constant range [0, 256), ``Cast`` to float); the
  embedding as a flax ``Dense`` (MatMul, no bias); flax's ``LayerNorm`` with the variance as
  ``E[x^2] - E[x]^2`` (ReduceMean(x * x) - ReduceMean(x)^2, the mean ``Expand``-ed to the
  token tensor's shape before the Sub, as ``jnp.broadcast_to`` exports); a Dense + tanh-GELU
  + Dense MLP with its residual; ``ReduceMax`` over the channels (a max-shifted form) and
  then, on the transposed [1, C, T], ``ReduceSum`` (sum over time) and ``GlobalMaxPool``
  (max over time) on 3-D tensors; a Dense head to 4 labels.
- ``svtr_bn1d``: an SVTR block whose token mixer ends with ``BatchNorm1d`` over the channels
  of [B, C, L] (``norm="bn"``), as torch writes it: Transpose [B, L, C] -> [B, C, L],
  BatchNormalization, Transpose back.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from support.corpus_transformer import Tokens

BYTES = 256
BYTE_TOKENS = 16


def byte_feeds(seed: int = 0, count: int = 1):
    """``count`` feeds of byte ids (printable ASCII)."""
    rng = np.random.default_rng(seed)
    return [{"ids": rng.integers(32, 127, (1, BYTE_TOKENS)).astype(np.int32)}
            for _ in range(count)]


def one_hot(t: Tokens, ids: str) -> str:
    """jax.nn.one_hot as jax2tf writes it: ids[..., None] == arange(256), cast to float."""
    column = t.op("Unsqueeze", [ids, t.const(np.array([-1], np.int64))], name="onehot_unsqueeze")
    hot = t.op("Equal", [column, t.const(np.arange(BYTES, dtype=np.int32))], name="onehot_eq")
    return t.op("Cast", [hot], name="onehot_cast", to=TensorProto.FLOAT)


def flax_layer_norm(t: Tokens, x: str, channels: int, name: str = "ln") -> str:
    """flax.linen.LayerNorm: mean, mean of squares, var = E[x^2] - E[x]^2, the mean broadcast
    to x's shape (Expand) before the Sub, Div by Sqrt(var + eps), scale, bias."""
    shape = t.const(np.array([1, BYTE_TOKENS, channels], np.int64))
    mean = t.op("ReduceMean", [x], name=f"{name}_mean", axes=[-1], keepdims=1)
    square_mean = t.op("ReduceMean", [t.op("Mul", [x, x], name=f"{name}_square")],
                       name=f"{name}_square_mean", axes=[-1], keepdims=1)
    var = t.op("Sub", [square_mean, t.op("Mul", [mean, mean], name=f"{name}_mean_square")],
               name=f"{name}_var")
    centred = t.op("Sub", [x, t.op("Expand", [mean, shape], name=f"{name}_expand")],
                   name=f"{name}_centre")
    std = t.op("Sqrt", [t.op("Add", [var, t.scalar(1e-6)], name=f"{name}_eps")],
               name=f"{name}_std")
    gamma = t.const((1 + 0.1 * t.rng.standard_normal(channels)).astype(np.float32))
    y = t.op("Mul", [t.op("Div", [centred, std], name=f"{name}_normed"), gamma],
             name=f"{name}_scale")
    return t.op("Add", [y, t.weight(channels, scale=0.1)], name=f"{name}_bias")


def dense(t: Tokens, x: str, fin: int, fout: int, bias: bool = True) -> str:
    y = t.op("MatMul", [x, t.weight(fin, fout, scale=fin ** -0.5)])
    return t.op("Add", [y, t.weight(fout, scale=0.05)]) if bias else y


def tanh_gelu(t: Tokens, x: str) -> str:
    """jax.nn.gelu(approximate=True) as jax2tf writes it: x * 0.5 * (1 + tanh(...x**3))."""
    cube = t.op("Mul", [t.op("Mul", [x, x]), x])
    inner = t.op("Add", [x, t.op("Mul", [cube, t.scalar(0.044715)])])
    tanh = t.op("Tanh", [t.op("Mul", [inner, t.scalar(math.sqrt(2 / math.pi))])])
    gate = t.op("Add", [tanh, t.scalar(1.0)])
    return t.op("Mul", [t.op("Mul", [x, gate]), t.scalar(0.5)])


def byte_classifier(seed: int = 0, channels: int = 64, offset: float = 0.0) -> onnx.ModelProto:
    """``offset``: added to the embedding table, so the tokens' mean is large next to their
    spread (the case where E[x^2] - E[x]^2 cancels)."""
    t = Tokens(seed)
    ids = t.b.input("ids", [1, BYTE_TOKENS], TensorProto.INT32)
    table = (t.rng.standard_normal((BYTES, channels)) + offset).astype(np.float32)
    x = t.op("MatMul", [one_hot(t, ids), t.const(table)], name="embed")
    h = flax_layer_norm(t, x, channels)
    h = t.op("Add", [h, dense(t, tanh_gelu(t, dense(t, h, channels, 2 * channels)),
                              2 * channels, channels)], name="residual")
    peak = t.op("ReduceMax", [h], name="channel_max", axes=[-1], keepdims=1)
    h = t.op("Sub", [h, t.op("Expand", [peak, t.const(np.array([1, BYTE_TOKENS, channels],
                                                                  np.int64))],
                             name="max_expand")], name="shift")
    time = t.op("Transpose", [h], name="to_time", perm=[0, 2, 1])
    total = t.op("ReduceSum", [time, t.const(np.array([-1], np.int64))], name="time_sum",
                 keepdims=1)
    peak_t = t.op("GlobalMaxPool", [time], name="time_max")
    pooled = t.op("Add", [t.op("Mul", [total, t.scalar(1.0 / BYTE_TOKENS)], name="time_mean"),
                          peak_t], name="pooled")
    flat = t.op("Reshape", [pooled, t.const(np.array([1, channels], np.int64))], name="flat")
    logits = dense(t, flat, channels, 4)
    return t.model(logits, [1, 4], "byte_classifier")


def svtr_bn1d(seed: int = 0, channels: int = 64, transposed: bool = True) -> onnx.ModelProto:
    """Conv stem on [1, C, 8, 16], flattened to tokens [1, 128, C], an attention + MLP block,
    then BatchNorm1d over the channels: through Transpose [B, C, L] (``transposed``) or on the
    [B, C, L] tensor the stem's flatten gives (the BN before the token transpose)."""
    t, height, width = Tokens(seed), 8, 16
    x = t.b.input("x", [1, channels, height, width])
    local = t.op("Conv", [x, t.weight(channels, 1, 3, 3, scale=1 / 3),
                          t.weight(channels, scale=0.05)], kernel_shape=[3, 3], pads=[1] * 4,
                 group=channels)
    flat = t.op("Reshape", [t.op("Add", [x, local]),
                            t.const(np.array([1, channels, height * width], np.int64))])
    if not transposed:
        flat = _bn(t, flat, channels, "bn_before")
    y = t.op("Transpose", [flat], perm=[0, 2, 1])
    y = t.encoder(y, channels, 2, ln="op") if t.b.opset >= 17 else t.encoder(y, channels, 2)
    if transposed:
        y = t.op("Transpose", [_bn(t, t.op("Transpose", [y], perm=[0, 2, 1]), channels,
                                   "bn_tokens")], perm=[0, 2, 1])
    y = dense(t, y, channels, channels)
    return t.model(y, [1, height * width, channels], "svtr_bn1d")


def _bn(t: Tokens, x: str, channels: int, name: str) -> str:
    rng = t.rng
    return t.op("BatchNormalization", [
        x, t.const((1 + 0.1 * rng.standard_normal(channels)).astype(np.float32)),
        t.const((0.1 * rng.standard_normal(channels)).astype(np.float32)),
        t.const((0.1 * rng.standard_normal(channels)).astype(np.float32)),
        t.const((0.5 + rng.random(channels)).astype(np.float32))], name=name, epsilon=1e-5)
