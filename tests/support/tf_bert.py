"""A Keras BERT layer as tf2onnx writes it (g2p-id's bert_pron, in small): Dense layers as
Gemm with ``beta=0`` and no C, the attention heads moved through 5-D tensors (Unsqueeze ->
rank-5 Transpose -> Reshape), the LayerNorm's moments as GlobalAveragePool of ``[N, T, C]``
and tf's batchnorm formula ``x * s + (beta - m * s)``, ``s = Reciprocal(Sqrt(v + eps)) * gamma``.
"""
from __future__ import annotations

import numpy as np
import onnx

from support.models import Builder


def _i64(b: Builder, values) -> str:
    return b.const(np.array(values, np.int64))


def dense(b: Builder, x: str, c: int) -> str:
    """tf2onnx's Dense without bias on ``[T, C]``: Gemm, transB, beta 0, no C."""
    return b.op("Gemm", [x, b.weight(c, c)], transB=1, beta=0.0)


def head_moves(b: Builder, x: str, t: int, heads: int, depth: int) -> str:
    """Q, K and V of ``x [1, T, C]`` through bert_pron's three 5-D head moves, their
    attention, and its heads moved back to ``[1, T, C]``."""
    c = heads * depth
    flat = b.op("Reshape", [x, _i64(b, [t, c])])
    q, k, v = (b.op("Reshape", [dense(b, flat, c), _i64(b, [1, t, heads, depth])])
               for _ in range(3))
    q = b.op("Unsqueeze", [q, _i64(b, [1])])  # [1, 1, T, H, D]
    q = b.op("Transpose", [q], perm=[0, 3, 1, 2, 4])  # [1, H, 1, T, D]
    q = b.op("Reshape", [q, _i64(b, [heads, t, depth])])
    k = b.op("Unsqueeze", [k, _i64(b, [2])])  # [1, T, 1, H, D]
    k = b.op("Transpose", [k], perm=[0, 3, 1, 2, 4])  # [1, H, T, 1, D]
    k = b.op("Reshape", [k, _i64(b, [heads, t, depth])])
    v = b.op("Unsqueeze", [v, _i64(b, [2])])  # [1, T, 1, H, D]
    v = b.op("Transpose", [v], perm=[0, 3, 2, 4, 1])  # [1, H, 1, D, T]
    v = b.op("Reshape", [v, _i64(b, [heads, depth, t])])
    v = b.op("Transpose", [v], perm=[0, 2, 1])
    scores = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 2, 1])])
    scores = b.op("Reshape", [scores, _i64(b, [1, heads, t, t])])
    probs = b.op("Reshape", [b.op("Softmax", [scores], axis=-1), _i64(b, [heads, t, t])])
    out = b.op("Reshape", [b.op("MatMul", [probs, v]), _i64(b, [1, heads, t, depth])])
    out = b.op("Unsqueeze", [out, _i64(b, [1])])  # [1, 1, H, T, D]
    out = b.op("Transpose", [out], perm=[0, 3, 1, 2, 4])  # [1, T, 1, H, D]
    out = dense(b, b.op("Reshape", [out, _i64(b, [t, c])]), c)
    return b.op("Reshape", [out, _i64(b, [1, t, c])])


def keras_layer_norm(b: Builder, x: str, c: int) -> str:
    """tf2onnx's Keras LayerNormalization of ``x [N, T, C]`` with GlobalAveragePool moments."""
    mean = b.op("GlobalAveragePool", [x])
    d = b.op("Sub", [x, mean])
    var = b.op("GlobalAveragePool", [b.op("Mul", [d, d])])
    r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(1e-3))])])])
    gamma = (1 + 0.1 * b.rng.standard_normal(c)).astype(np.float32)
    s = b.op("Mul", [r, b.const(gamma)])
    shift = b.op("Sub", [b.const((0.1 * b.rng.standard_normal(c)).astype(np.float32)),
                         b.op("Mul", [mean, s])])
    return b.op("Add", [b.op("Mul", [x, s]), shift])


def bert_layer(t: int = 6, heads: int = 2, depth: int = 4, seed: int = 0) -> onnx.ModelProto:
    """x [1, T, C] -> attention -> + x -> LayerNorm: one post-norm BERT block's first half."""
    b = Builder(seed=seed, opset=13)
    x = b.input("x", [1, t, heads * depth])
    y = b.op("Add", [x, head_moves(b, x, t, heads, depth)])
    return b.model([keras_layer_norm(b, y, heads * depth)])


def attention_only(t: int = 6, heads: int = 2, depth: int = 4) -> onnx.ModelProto:
    b = Builder(seed=1, opset=13)
    return b.model([head_moves(b, b.input("x", [1, t, heads * depth]), t, heads, depth)])


def layer_norm_only(t: int = 6, c: int = 8) -> onnx.ModelProto:
    b = Builder(seed=2, opset=13)
    return b.model([keras_layer_norm(b, b.input("x", [1, t, c]), c)])
