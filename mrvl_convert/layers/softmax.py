"""Softmax over the last physical axis: the features of a 2-D ``[N, C]`` tensor, the channels
of a 4-D image (NHWC; ONNX axis 1), or the last axis of a token tensor (attention scores
``[B, heads, T, T]`` or ``[B, T, C]``, kept in logical order).

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc) with no
``axis``: its mrvl.py takes only rank 2, or rank 4 on NHWC axis 3, so the axis is implied. The
lowering puts the softmax axis last physically: NHWC for the channels of an image, the logical
order for the last axis of a token tensor, which is then NHWC's C as it lies (``ir/layout.py``).
A 3-D ``[B, T, C]`` is written as the 4-D ``[B, 1, T, C]`` (R4 with the softmax axis kept last,
``r4_keeps_last``), the rank-4 axis-3 case that mrvl.py takes; the codegen's own trailing-1
padding would make it ``[B, T, C, 1]``, a softmax over a size-1 C.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import softmax_axis, static_shape
from mrvl_convert.ir.layout import LayoutContext, identity, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, emit_unary


def lower(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("softmax")
    source = node.inputs[0]
    rank = len(static_shape(source))
    axis = softmax_axis(node, rank, ctx.stage.opset)
    perm = ctx.keep_order(source, native(rank))
    if perm[-1] != axis:  # the axis must lie last: NHWC for channels, else the logical order
        perm = native(rank) if native(rank)[-1] == axis else identity(rank)
    emit_unary(composite, ctx, "Softmax", source, {}, composite.output, perm=perm)


class SoftmaxKernel(UnaryKernel):
    """exp(x - max) / sum, over the last axis, in float32."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        if len(spec.input_shapes[0]) not in (2, 3, 4):
            raise spec.error("inputs", f"Softmax takes a 2-D to 4-D input, got "
                                       f"{list(spec.input_shapes[0])}")

    def compute(self, x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        e /= e.sum(axis=-1, keepdims=True, dtype=np.float32)
        return e

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Softmax over the last axis (opset 13: that axis alone, as ``compute``)."""
        return [builder.op("Softmax", [inputs[0]], axis=-1)]


KIND = LayerKind(
    name="Softmax",
    summary="softmax over the last physical axis (the features of `[N, C]`, the channels of "
            "NHWC, the last axis of a token tensor)",
    kernel=SoftmaxKernel,
    lower=lower,
    required_roles=roles("softmax"),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    r4_keeps_last=True,
    source=SOURCE,
)
