"""A madmom-style network on a batchless ``[T, F]`` spectrogram (key_cnn's form): each Conv
between Unsqueeze(0) + Transpose and Transpose + Squeeze(0), BatchNormalization written as Mul
and Add on ``[T, F, C]`` (channels last, no batch), a Reshape of ``[T, F, C]`` frames, a mean
over time and frequency, and a Squeeze without axes of a tensor with no unit axis. The
converter computes its ``[T, F, C]`` tensors as ``[1, T, F, C]`` (``batchless_lift``,
``sequence_lift``): what the per-layer comparison must map back onto the model's tensors."""
from __future__ import annotations

import numpy as np
import onnx

from support.models import Builder


def _i64(b: Builder, *values: int) -> str:
    return b.const(np.array(values, np.int64))


def _conv_block(b: Builder, x: str, cin: int, cout: int, tag: str) -> str:
    """[T, F, cin] -> Conv 3x3 (pads 1) -> [T, F, cout] -> BN as Mul/Add -> Elu, batchless."""
    y = b.op("Unsqueeze", [x, _i64(b, 0)], name=f"{tag}_add_batch")
    y = b.op("Transpose", [y], name=f"{tag}_to_nchw", perm=[0, 3, 1, 2])
    y = b.conv(y, cin, cout, pads=[1, 1, 1, 1])
    y = b.op("Transpose", [y], name=f"{tag}_to_nhwc", perm=[0, 2, 3, 1])
    y = b.op("Squeeze", [y, _i64(b, 0)], name=f"{tag}_remove_batch")
    scale = b.const((1 + 0.2 * b.rng.standard_normal(cout)).astype(np.float32))
    y = b.op("Mul", [y, scale], name=f"{tag}_bn_mul")
    y = b.op("Add", [y, b.const((0.1 * b.rng.standard_normal(cout)).astype(np.float32))],
             name=f"{tag}_bn_add")
    return b.op("Elu", [y], name=f"{tag}_elu", alpha=1.0)


def batchless_cnn(frames: int = 12, bins: int = 10, seed: int = 45, *,
                  reshape: bool = True) -> onnx.ModelProto:
    """x [frames, bins] -> two Conv blocks on [T, F, C] -> (with ``reshape``: Reshape
    [T, F * C] and back to [T, F, C]) -> mean over T and F (keepdims 0) -> Squeeze (no axes,
    nothing to squeeze) -> y [C]. Without the Reshapes it is key_cnn's tail: the frame lift
    reaches the Squeeze."""
    b = Builder(seed=seed, opset=18)
    x = b.input("x", [frames, bins])
    y = b.op("Unsqueeze", [x, _i64(b, 2)], name="expand_channel")  # [T, F, 1]
    y = _conv_block(b, y, 1, 4, "block1")
    y = _conv_block(b, y, 4, 6, "block2")
    if reshape:
        y = b.op("Reshape", [y, _i64(b, frames, bins * 6)], name="frames_flat")
        y = b.op("Reshape", [y, _i64(b, frames, bins, 6)], name="frames_back")
    y = b.op("ReduceMean", [y, _i64(b, 0, 1)], name="mean", keepdims=0)  # [C]
    return b.model([b.op("Squeeze", [y], name="squeeze_all")])
