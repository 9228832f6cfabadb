"""transpose: a bare Transpose of 3 or 4 axes that is not an NCHW<->NHWC layout change.

A model's own NCHW<->NHWC Transposes cost nothing (``layout_transform.py``); any other
permutation becomes this layer, which reads its input in whatever physical layout it has and
writes its output in the accelerator's layout for the output rank (NHWC for 4-D), or, for a
token tensor that lies in its logical order (``ir/layout.py``), in logical order too (a head
split or merge), so ``axes`` is the permutation of the physical axes: ``out = in.transpose(axes)``. A permutation that the
layouts absorb entirely emits no layer. The contract is the newer Marvell codegen's bare
``transpose``: princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``CreateMrvlLayer4OpNode`` (Relay's
``TransposeAttrs.axes`` as ``SetCallNodeAttribute`` writes it, and ``src_layout`` /
``dst_layout`` "NHWC").
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.core.graph import attr, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, identity, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import MARVELL, LayerKind, ints, roles, written
from mrvl_convert.layers._lowering import new_layer


def physical_axes(in_perm: Sequence[int], perm: Sequence[int],
                  out_perm: Sequence[int]) -> Tuple[int, ...]:
    """The physical permutation of Transpose(perm) from an input laid out in ``in_perm`` to an
    output laid out in ``out_perm`` (physical = logical.transpose(layout perm))."""
    inverse = [0] * len(in_perm)
    for i, p in enumerate(in_perm):
        inverse[p] = i
    return tuple(inverse[perm[p]] for p in out_perm)


def lower(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("transpose")
    source = node.inputs[0]
    current = ctx.layout(source)
    index, layout = ctx.require(source, current.perm)
    perm = [int(p) for p in attr(node, "perm")]
    out_shape = tuple(static_shape(composite.output))
    rank = len(out_shape)
    # A token tensor stays in logical order (a head split [B, T, h, d] -> [B, h, T, d] is one
    # layer, with no NHWC in between); an image comes out NHWC, as every 4-D layer wants it.
    token = ctx.keep_order(source, native(rank)) != native(rank)
    out_perm = identity(rank) if token else native(rank)
    axes = physical_axes(layout.perm, perm, out_perm)
    labels = "".join(layout.labels[p] for p in perm)
    out = TensorLayout(out_shape, out_perm, labels)
    if axes == tuple(range(len(axes))):
        ctx.alias(composite.output, source, out)  # the layouts absorb it: same bytes
        return
    ctx.emit(new_layer(composite, "transpose", [index], [layout], out, {"axes": axes}),
             composite.output)


class TransposeKernel(Kernel):
    """out = in.transpose(axes) over the physical axes."""

    exact = True
    keeps_every_value = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = spec.input_shapes[0]
        axes = spec.ints("axes", len(in_shape))
        if sorted(axes) != list(range(len(in_shape))):
            raise spec.error("attrs.axes", f"{list(axes)} is not a permutation of the "
                                           f"{len(in_shape)} axes of the input")
        self.axes = axes
        spec.expect_shape([in_shape[a] for a in axes])

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.transpose(self.axes))

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("Transpose", [inputs[0]], perm=list(self.axes))]


KIND = LayerKind(
    name="transpose",
    summary="out = in.transpose(axes) over the physical axes (3 or 4 of them)",
    kernel=TransposeKernel,
    lower=lower,
    required_roles=roles("transpose"),
    attrs=(ints("axes", "the permutation of the physical axes"),
           written("data_layout", "NHWC", "as the codegen writes it for a bare transpose"),
           written("out_layout", "NHWC", "as the codegen writes it for a bare transpose"),
           written("src_layout", "NHWC", "as the codegen writes it for a bare transpose"),
           written("dst_layout", "NHWC", "as the codegen writes it for a bare transpose")),
    layer_sets=frozenset({MARVELL}),
    source="princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc CreateMrvlLayer4OpNode",
)
