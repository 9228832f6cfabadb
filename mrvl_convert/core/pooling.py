"""The pooling output size: one formula for the converter's rule check and the simulator's kernels.

Kept free of onnx and numpy imports so that both sides can use it.
"""
from __future__ import annotations

import math


def pool_out_size(size: int, head: int, tail: int, kernel: int, stride: int, dilation: int,
                  ceil_mode: bool) -> int:
    """ONNX / onnxruntime output size; in ceil mode the last window must start inside the
    input or its leading padding (otherwise it would only see the implicit ceil extension).

    That last rule is what onnxruntime (1.21 and later) and PyTorch compute; onnx's shape
    inference (1.17 to at least 1.23) counts such a window, so the two can disagree by one.
    """
    span = size + head + tail - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = math.ceil(span / stride) + 1
    if (out - 1) * stride >= size + head:
        out -= 1
    return out
