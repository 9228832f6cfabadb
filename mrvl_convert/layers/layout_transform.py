"""layout_transform: a transpose between two layouts named by their axis letters.

The layout pass inserts one where a producer's layout differs from what its consumer needs
(``layout.LayoutContext.require``); a model's own NCHW<->NHWC Transpose matches the
``mrvl.layout_transform`` rule and costs nothing: the lowering only relabels the data. The
contract is upstream TVM v0.19's ``layout_transform`` (``src/relay/backend/contrib/mrvl/codegen.cc``).
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import attr, static_shape
from mrvl_convert.ir.layout import LayoutContext, transpose_layout
from mrvl_convert.ir.match import Composite
from mrvl_convert.core.artifact import first_value
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import Attr, LayerKind, roles


def lower(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("transpose")
    source = node.inputs[0]
    layout = transpose_layout(ctx.layout(source), attr(node, "perm"),
                              static_shape(composite.output))
    ctx.alias(composite.output, source, layout)


def _layout_issue(src: str, dst: str) -> Optional[str]:
    if not src or sorted(src) != sorted(dst) or len(set(src)) != len(src):
        return f"src_layout {src!r} and dst_layout {dst!r} are not permutations of each other"
    return None


class LayoutTransformKernel(Kernel):
    """out = in.transpose([src.index(c) for c in dst]), e.g. NCHW -> NHWC."""

    exact = True
    keeps_every_value = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        src, dst = spec.value("src_layout"), spec.value("dst_layout")
        issue = _layout_issue(src, dst)
        if issue:
            raise spec.error("attrs.src_layout", issue)
        in_shape = spec.input_shapes[0]
        if len(in_shape) != len(src):
            raise spec.error("attrs.src_layout", f"{src!r} does not fit input shape "
                                                 f"{list(in_shape)}")
        self.perm = tuple(src.index(ch) for ch in dst)
        spec.expect_shape(tuple(in_shape[p] for p in self.perm))

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.transpose(self.perm))

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("Transpose", [inputs[0]], perm=list(self.perm))]

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        return _layout_issue(str(first_value(attrs.get("src_layout")) or ""),
                             str(first_value(attrs.get("dst_layout")) or ""))


KIND = LayerKind(
    name="layout_transform",
    summary="out = in.transpose([src.index(c) for c in dst])",
    kernel=LayoutTransformKernel,
    lower=lower,
    required_roles=roles("transpose"),
    attrs=(Attr("src_layout", "str", "axis letters of the input, e.g. NCHW"),
           Attr("dst_layout", "str", "axis letters of the output, e.g. NHWC")),
    composite="mrvl.layout_transform",
    source="apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc",
)
