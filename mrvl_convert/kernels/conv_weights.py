"""Forms of a convolution's weights: grouped weights written as one block-diagonal kernel, and
telling such kernels (and channel copies) apart again.

Lowering expands a grouped convolution (Conv2D, Conv2DTranspose, their int8 forms) into groups
1 with ``block_diagonal``, exactly: the added taps are zeros. A kernel reading the weights back
finds the groups again (``diagonal_groups``, ``diagonal_blocks``) to skip the zero products,
and a 1x1 kernel that only copies input channels (``channel_copies``) to move values instead of
multiplying them. Weights are OIHW when lowered, OHWI when read back from a Constants-JSON.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np


def block_diagonal(weights: np.ndarray, groups: int) -> np.ndarray:
    """[O, I/g, KH, KW] grouped weights as [O, I, KH, KW] with zeros outside each group, in
    the weights' own dtype."""
    out_channels, per_group, kh, kw = weights.shape
    full = np.zeros((out_channels, per_group * groups, kh, kw), weights.dtype)
    per_out = out_channels // groups
    for g in range(groups):
        full[g * per_out:(g + 1) * per_out, g * per_group:(g + 1) * per_group] = \
            weights[g * per_out:(g + 1) * per_out]
    return full


def channel_copies(kernel: np.ndarray) -> Optional[np.ndarray]:
    """For a 1x1 OHWI kernel whose every output row is one 1.0 and zeros: the input channel
    each output copies (int64), else None."""
    o, kh, kw, i = kernel.shape
    if kh != 1 or kw != 1:
        return None
    matrix = kernel.reshape(o, i)
    order = matrix.argmax(axis=1)
    one_hot = np.zeros_like(matrix)
    one_hot[np.arange(o), order] = 1.0
    return order.astype(np.int64) if np.array_equal(matrix, one_hot) else None


def diagonal_groups(kernel: np.ndarray) -> int:
    """The most groups g (dividing O and I) such that the OHWI kernel is zero outside its g
    diagonal [O/g, KH, KW, I/g] blocks; 1 if there are none."""
    o, _, _, i = kernel.shape
    used = np.abs(kernel).max(axis=(1, 2)) > 0  # [O, I]: which input each output reads
    common = [g for g in range(min(o, i), 1, -1) if o % g == 0 and i % g == 0]
    for g in common:
        same_block = (np.arange(o)[:, None] // (o // g)) == (np.arange(i)[None, :] // (i // g))
        if not used[~same_block].any():
            return g
    return 1


def diagonal_blocks(kernel: np.ndarray, groups: int) -> List[np.ndarray]:
    """The ``groups`` diagonal [O/g, KH, KW, I/g] blocks of an OHWI kernel."""
    o, _, _, i = kernel.shape
    og, ig = o // groups, i // groups
    return [kernel[k * og:(k + 1) * og, :, :, k * ig:(k + 1) * ig] for k in range(groups)]
