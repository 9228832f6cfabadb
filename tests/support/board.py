"""Models for the device check: as many Mrvl subgraphs as asked, and too many outputs."""
from __future__ import annotations

import onnx

from support.models import Builder


def conv_chain(subgraphs: int, *, seed: int = 0) -> onnx.ModelProto:
    """``subgraphs`` times Conv then Sin (no Marvell layer): each Conv is one Mrvl subgraph,
    each Sin a CPU stage between them."""
    b = Builder(seed)
    y = b.input("x", [1, 4, 8, 8])
    for i in range(subgraphs):
        y = b.op("Sin", [b.conv(y, 4, 4, pads=[1, 1, 1, 1])], name=f"sin{i}")
    return b.model([y])


def many_outputs(outputs: int, *, seed: int = 0) -> onnx.ModelProto:
    """One input, ``outputs`` 1x1 convolutions of it, each a model output."""
    b = Builder(seed)
    x = b.input("x", [1, 4, 8, 8])
    return b.model([b.conv(x, 4, 2, k=1) for _ in range(outputs)])
