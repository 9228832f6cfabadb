"""Rsqrt: out = 1 / sqrt(in), from ONNX ``Reciprocal(Sqrt(x))``.

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc), with no
attribute of its own.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from mrvl_convert.ir.layout import LayoutContext
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, emit_unary


def lower(composite: Composite, ctx: LayoutContext) -> None:
    sqrt = composite.binding.node("sqrt")
    emit_unary(composite, ctx, "Rsqrt", sqrt.inputs[0], {}, composite.output)


class RsqrtKernel(UnaryKernel):
    """1 / sqrt(x) in float32: inf at 0, NaN below, as Reciprocal(Sqrt(x)) gives."""

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.reciprocal(np.sqrt(x))

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """Reciprocal(Sqrt(x)), each correctly rounded in both libraries: identical. (Rsqrt
        maps inf to 0: it keeps the default ``passes_nonfinite``.)"""
        return [builder.op("Reciprocal", [builder.op("Sqrt", [inputs[0]])])]


KIND = LayerKind(
    name="Rsqrt",
    summary="out = 1 / sqrt(in)",
    kernel=RsqrtKernel,
    lower=lower,
    required_roles=roles("sqrt", "reciprocal"),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    source=SOURCE,
)
