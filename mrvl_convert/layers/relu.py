"""Relu: out = max(in, 0), a standalone layer (a Relu after Conv2D, FC, Sum2D or Mul2D is fused
into it instead).

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc) with
``alpha`` always "1.000000" (its ``alpha_override``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import LayerKind, roles, written
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, lowering


class ReluKernel(UnaryKernel):
    """max(x, 0): a selection of fp16 values, already on the grid."""

    exact = True

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, np.float32(0.0))

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("Relu", [inputs[0]])]


KIND = LayerKind(
    name="Relu",
    summary="out = max(in, 0)",
    kernel=ReluKernel,
    lower=lowering("Relu", "relu"),
    required_roles=roles("relu"),
    attrs=(written("alpha", "1.000000", "the codegen's alpha_override, always 1"),),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    source=SOURCE,
)
