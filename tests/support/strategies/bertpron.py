"""tf2onnx's head moves through rank 5 (g2p-id's bert_pron): a rank-4 tensor -> Unsqueeze of
one or two axes -> Transpose by any permutation -> Reshape to a 2-D or 3-D view, optionally
with an int8 model's per-tensor QuantizeLinear -> DequantizeLinear pair after the Unsqueeze
and after the Transpose. ``frontend/rank5_transposes.py`` (and ``rank5_detours.py``'s
chains) make them rank 4."""
from __future__ import annotations

from typing import List

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder


def head_move(shape: List[int], axes: List[int], perm: List[int], int8: bool) -> onnx.ModelProto:
    b = Builder(opset=13)

    def step(y: str) -> str:
        if not int8:
            return y
        scale, zero = b.const(np.float32(0.03)), b.const(np.int8(-2))
        return b.op("DequantizeLinear", [b.op("QuantizeLinear", [y, scale, zero]), scale, zero])

    y = b.op("Relu", [b.input("x", shape)])
    y = step(b.op("Unsqueeze", [y, b.const(np.array(axes, np.int64))]))
    y = step(b.op("Transpose", [y], perm=perm))
    total = int(np.prod(shape))
    target = [total // shape[-1], shape[-1]] if len(axes) == 1 else [shape[0], -1, shape[-1]]
    return b.model([b.op("Relu", [b.op("Reshape", [y, b.const(np.array(target, np.int64))])])])


@st.composite
def head_moves(draw) -> onnx.ModelProto:
    shape = [1] + draw(st.lists(st.integers(1, 4), min_size=3, max_size=3))
    units = draw(st.integers(1, 2))
    rank = 4 + units
    axes = sorted(draw(st.lists(st.integers(0, rank - 1), min_size=units, max_size=units,
                                unique=True)))
    perm = draw(st.permutations(list(range(rank))))
    return head_move(shape, axes, list(perm), draw(st.booleans()))
