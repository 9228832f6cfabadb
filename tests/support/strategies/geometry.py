"""Output sizes of convolution and pooling windows, as ONNX shape inference computes them."""
from __future__ import annotations


def conv_out(size: int, k: int, s: int, p0: int, p1: int, d: int = 1) -> int:
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


def pool_out(size: int, k: int, s: int, p0: int, p1: int, d: int = 1, ceil: bool = False) -> int:
    num = size + p0 + p1 - d * (k - 1) - 1
    if not ceil:
        return num // s + 1
    out = -(-num // s) + 1
    # the last window must start inside the input or the head padding (onnxruntime / PyTorch rule)
    if (out - 1) * s >= size + p0:
        out -= 1
    return out


def _ceil_ambiguous(size: int, k: int, s: int, p0: int, p1: int, d: int = 1) -> bool:
    """onnx shape inference and onnxruntime disagree on ceil_mode when the last window would
    start in the tail padding: such models fail the checker's strict shape inference."""
    num = size + p0 + p1 - d * (k - 1) - 1
    return -(-num // s) + 1 != pool_out(size, k, s, p0, p1, d, True)
