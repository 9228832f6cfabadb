"""ReduceMean and ReduceMax: mean or max over one physical axis (R4 in the newer set).

Matched from ONNX ``ReduceMean`` / ``ReduceMax`` over one axis; the input keeps the
accelerator's layout for its rank (NHWC for 4-D) and ``axis`` is the physical axis,
normalised to 0 <= axis < rank as the codegen does. ``keepdims`` is Relay's ``ReduceAttrs``
field. A ReduceMean over H and W of a 4-D tensor (how some exporters write a global average
pool) is the GlobalAvgpool2D layer instead (``rules/marvell/reduce.yaml``). The contract is
the newer Marvell codegen's ``mrvl.reduce_mean`` / ``mrvl.reduce_max``: princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateCompositeMrvlReduceLayer`` and ``CreateCompositeMrvlReduceMax`` (``axis`` normalised,
``resizeInputOutputLayoutTo4dim``).
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
from mrvl_convert.core.graph import attr, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.core.graph import reduce_axes
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers._kind import MARVELL, Attr, LayerKind, roles
from mrvl_convert.layers._lowering import new_layer


def _lowering(kind: str) -> Callable[[Composite, LayoutContext], None]:
    def lower(composite: Composite, ctx: LayoutContext) -> None:
        node = composite.binding.node("reduce")
        rank = len(static_shape(node.inputs[0]))
        perm = native(rank)
        index, layout = ctx.require(node.inputs[0], perm)
        [axis] = reduce_axes(node)
        keep = int(attr(node, "keepdims", 1))
        if keep:
            out_perm, labels = perm, layout.labels
        else:  # the same physical order with the reduced axis gone
            kept = [p for p in perm if p != axis]
            out_perm = tuple(sorted(kept).index(p) for p in kept)
            labels = "".join(c for i, c in enumerate(layout.labels) if i != axis)
        out = TensorLayout(tuple(static_shape(composite.output)), out_perm, labels)
        ctx.emit(new_layer(composite, kind, [index], [layout], out,
                           {"axis": perm.index(axis), "keepdims": keep}), composite.output)
    return lower


class _ReduceKernel(Kernel):
    reducer: Callable[..., np.ndarray] = staticmethod(np.mean)

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = spec.input_shapes[0]
        axis = spec.value("axis")
        if not 0 <= axis < len(in_shape):
            raise spec.error("attrs.axis", f"{axis} is out of range for rank {len(in_shape)}")
        self.axis, self.keep = axis, spec.value("keepdims")
        out = [1 if i == axis else d for i, d in enumerate(in_shape)]
        spec.expect_shape(out if self.keep else out[:axis] + out[axis + 1:])

    def run(self, x: np.ndarray) -> np.ndarray:
        return self.reducer(x, axis=self.axis, keepdims=bool(self.keep), dtype=np.float32)


class ReduceMeanKernel(_ReduceKernel):
    """Mean over physical axis ``axis``, accumulated in float32."""


class ReduceMaxKernel(_ReduceKernel):
    """Max over physical axis ``axis`` (a selection: exact)."""

    exact = True

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.max(x, axis=self.axis, keepdims=bool(self.keep))


_ATTRS = (Attr("axis", "int", "the physical axis reduced, 0 <= axis < rank"),
          Attr("keepdims", "flag", "keep the reduced axis with size 1", default=True))
_SOURCE = ("princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc ")
REDUCE_MEAN = LayerKind(
    name="ReduceMean", summary="mean over the physical axis `axis`",
    kernel=ReduceMeanKernel, lower=_lowering("ReduceMean"), required_roles=roles("reduce"),
    attrs=_ATTRS, layer_sets=frozenset({MARVELL}), r4=frozenset({MARVELL}),
    source=_SOURCE + "CreateCompositeMrvlReduceLayer")
REDUCE_MAX = LayerKind(
    name="ReduceMax", summary="max over the physical axis `axis`",
    kernel=ReduceMaxKernel, lower=_lowering("ReduceMax"), required_roles=roles("reduce"),
    attrs=_ATTRS, layer_sets=frozenset({MARVELL}), r4=frozenset({MARVELL}),
    source=_SOURCE + "CreateCompositeMrvlReduceMax")
