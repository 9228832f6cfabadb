"""Sigmoid: out = 1 / (1 + exp(-in)), a standalone layer (after Conv2D, FC, Sum2D or Mul2D it is
fused as their ``activation_type`` instead); with Mul2D it makes SiLU / Swish ``x * Sigmoid(x)``.

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc), with no
attribute of its own.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.ufuncs import activate_inplace
from mrvl_convert.layers._kind import Activation, LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, lowering


class SigmoidKernel(UnaryKernel):
    """The fused sigmoid's float32 formula (``ufuncs.activate_inplace``) on a copy."""

    def compute(self, x: np.ndarray) -> np.ndarray:
        return activate_inplace(np.array(x, dtype=np.float32), Activation.SIGMOID)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.activation(inputs[0], Activation.SIGMOID)]


KIND = LayerKind(
    name="Sigmoid",
    summary="out = 1 / (1 + exp(-in))",
    kernel=SigmoidKernel,
    lower=lowering("Sigmoid", "sigmoid"),
    required_roles=roles("sigmoid"),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    quantizable=True,
    source=SOURCE,
)
