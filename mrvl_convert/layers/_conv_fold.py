"""Folding what follows a convolution into its weights: a BatchNormalization, a per-channel
Mul and Add (``layers/conv2d.py``'s lowering). Computed in float64 and rounded to float32 once,
as numpy computes ``(weights * scale).astype(float32)``."""
from __future__ import annotations

import numpy as np

from mrvl_convert.core.graph import attr, const_value, is_const
from mrvl_convert.ir.match import Composite


def per_channel(tensor, channels: int) -> np.ndarray:
    """A constant operand that varies at most along the channel axis, as [channels] float64."""
    return np.broadcast_to(const_value(tensor).astype(np.float64).reshape(-1), (channels,))


def bn_affine(bn) -> "tuple[np.ndarray, np.ndarray]":
    """BatchNormalization as y = x * scale + shift, in float64."""
    gamma, beta, mean, var = (const_value(bn.inputs[i]).astype(np.float64) for i in (1, 2, 3, 4))
    scale = gamma / np.sqrt(var + float(attr(bn, "epsilon", 1e-5)))
    return scale, beta - mean * scale


def tail_affine(composite: Composite, channels: int) -> "tuple[np.ndarray, np.ndarray]":
    """The per-channel ``scale`` (Mul) and ``shift`` (Add) steps after the anchor, folded into
    one y = x * scale + shift (float64)."""
    scale, shift = np.ones(channels), np.zeros(channels)
    mul = composite.binding.node("scale")
    if mul is not None and mul.op == "Mul":
        scale = per_channel([t for t in mul.inputs if is_const(t)][0], channels).copy()
    add = composite.binding.node("shift")
    if add is not None:
        shift = per_channel([t for t in add.inputs if is_const(t)][0], channels).copy()
    return scale, shift


def scaled(weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """OIHW ``weights`` times a float64 ``scale`` per output channel, rounded to float32 as
    numpy computes it, block by block: (weights * scale).astype(float32) bit for bit, without
    the float64 copy of the whole kernel in between."""
    return np.multiply(weights, scale[:, None, None, None], dtype=np.float64,
                       out=np.empty(weights.shape, np.float32), casting="same_kind")
