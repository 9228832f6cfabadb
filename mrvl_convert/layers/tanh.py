"""Tanh: out = tanh(in), a standalone layer (after Conv2D, FC, Sum2D or Mul2D it is fused as their
``activation_type`` instead).

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc), with no
attribute of its own.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, lowering


class TanhKernel(UnaryKernel):
    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(x)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("Tanh", [inputs[0]])]


KIND = LayerKind(
    name="Tanh",
    summary="out = tanh(in)",
    kernel=TanhKernel,
    lower=lowering("Tanh", "tanh"),
    required_roles=roles("tanh"),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    quantizable=True,
    source=SOURCE,
)
