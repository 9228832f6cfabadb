"""Softmax over the last physical axis: the features of a 2-D ``[N, C]`` tensor, or the channels
of a 4-D one (NHWC; ONNX axis 1 from opset 13 on).

The newer codegen writes it in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc) with no
``axis``: its mrvl.py takes only rank 2, or rank 4 on NHWC axis 3, so the axis is implied.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, UnaryKernel, lowering


class SoftmaxKernel(UnaryKernel):
    """exp(x - max) / sum, over the last axis, in float32."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        if len(spec.input_shapes[0]) not in (2, 4):
            raise spec.error("inputs", f"Softmax takes a 2-D or 4-D input, got "
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
            "NHWC)",
    kernel=SoftmaxKernel,
    lower=lowering("Softmax", "softmax"),
    required_roles=roles("softmax"),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    r4_keeps_2d=True,
    source=SOURCE,
)
