"""ReduceMean and ReduceMax: mean or max over one physical axis (R4 in the newer set).

Matched from ONNX ``ReduceMean`` / ``ReduceMax`` over one axis; ``axis`` is the physical axis,
normalised to 0 <= axis < rank as the codegen does. The input is reduced in the order it has
when the axis then lies where the layer reduces, else in NHWC (an image's C or H), else in its
logical order (the last axis of a token tensor: ``[B, T, C]`` axis 2, or ``[B, heads, T, d]``
axis 3, NHWC's C as it lies; a LayerNorm's mean), else with the axis moved last by a
layout_transform (``[B, T, C]`` axis 1, a mean over tokens, as ``[B, C, T]`` axis 2). ``keepdims`` is Relay's ``ReduceAttrs``
field. A ReduceMean over H and W of a 4-D tensor (how some exporters write a global average
pool) is the GlobalAvgpool2D layer instead (``rules/marvell/reduce.yaml``). The contract is
the newer Marvell codegen's ``mrvl.reduce_mean`` / ``mrvl.reduce_max``: princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateCompositeMrvlReduceLayer`` and ``CreateCompositeMrvlReduceMax`` (``axis`` normalised,
``resizeInputOutputLayoutTo4dim``).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, identity, native
from mrvl_convert.core.graph import reduce_axes
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers._kind import MARVELL, Attr, LayerKind, roles
from mrvl_convert.layers._lowering import new_layer


def _order(ctx: LayoutContext, source: gs.Tensor, axis: int,
           allowed: Mapping[int, Tuple[int, ...]]) -> Tuple[int, ...]:
    """The physical order to reduce ``axis`` of ``source`` in: the one it has if the axis then
    lands where the layer reduces (``allowed``: rank -> physical axes), else NHWC, else the
    logical order (the last axis of a token tensor, NHWC's C as it lies)."""
    rank = len(static_shape(source))
    # Last: the axis moved to the end (a token tensor's T, [B, T, C] -> [B, C, T], by one
    # layout_transform), for a mean over tokens (timm's global pool).
    last = tuple(a for a in range(rank) if a != axis) + (axis,)
    orders = (ctx.keep_order(source, native(rank)), native(rank), identity(rank), last)
    for perm in orders:
        if perm.index(axis) in allowed.get(rank, range(rank)):
            return perm
    return orders[0]  # pragma: no cover - the rule's check refuses such an axis


def _lowering(kind: str, allowed: Mapping[int, Tuple[int, ...]]
              ) -> Callable[[Composite, LayoutContext], None]:
    def lower(composite: Composite, ctx: LayoutContext) -> None:
        node = composite.binding.node("reduce")
        [axis] = reduce_axes(node)
        perm = _order(ctx, node.inputs[0], axis, allowed)
        index, layout = ctx.require(node.inputs[0], perm)
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


if TYPE_CHECKING:  # pragma: no cover
    from mrvl_convert.kernels.onnx_form import OnnxBuilder


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

    def to_onnx(self, builder: "OnnxBuilder", inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX ReduceMean. ``np.mean(x, axis, dtype=float32)`` is a float32 sum divided by the
        count; onnxruntime sums in its own order (and may scale by the reciprocal count): the
        same float16 value or its neighbour, as for every summing layer."""
        return [builder.op("ReduceMean", [inputs[0]], axes=[self.axis], keepdims=int(self.keep))]

    def passes_nonfinite(self, index: int) -> bool:
        """Every input value is a term of some output's sum (inf + -inf is NaN)."""
        return True

    def finite_on_finite(self) -> bool:
        """A mean of float16 values is at most their largest magnitude times (1 + a few float32
        roundings), far below 65520 where rounding to float16 overflows, in any order."""
        return True


class ReduceMaxKernel(_ReduceKernel):
    """Max over physical axis ``axis`` (a selection: exact)."""

    exact = True

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.max(x, axis=self.axis, keepdims=bool(self.keep))


_ATTRS = (Attr("axis", "int", "the physical axis reduced, 0 <= axis < rank"),
          Attr("keepdims", "flag", "keep the reduced axis with size 1", default=True))
_SOURCE = ("princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc ")
#: Where the newer mrvl.py's ``reduce_mean`` reduces: rank -> physical axes (4-D: NHWC's H or
#: C; 3-D: the last axis).
MEAN_AXES = MappingProxyType({4: (1, 3), 3: (2,)})
REDUCE_MEAN = LayerKind(
    name="ReduceMean", summary="mean over the physical axis `axis`",
    kernel=ReduceMeanKernel, lower=_lowering("ReduceMean", MEAN_AXES),
    required_roles=roles("reduce"),
    attrs=_ATTRS, layer_sets=frozenset({MARVELL}), r4=frozenset({MARVELL}),
    source=_SOURCE + "CreateCompositeMrvlReduceLayer")
REDUCE_MAX = LayerKind(
    name="ReduceMax", summary="max over the physical axis `axis`",
    kernel=ReduceMaxKernel, lower=_lowering("ReduceMax", MappingProxyType({})),
    required_roles=roles("reduce"),
    attrs=_ATTRS, layer_sets=frozenset({MARVELL}), r4=frozenset({MARVELL}),
    source=_SOURCE + "CreateCompositeMrvlReduceMax")
