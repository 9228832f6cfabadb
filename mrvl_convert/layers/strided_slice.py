"""StridedSlice: ``out = in[begin:end:strides]`` on every physical axis (2-D or 4-D NHWC; a
3-D token tensor [B, T, C] as the NHWC [B, T, C, 1] it is).

Matched from ONNX ``Slice`` with constant starts, ends, axes and positive steps. The contract
is the newer Marvell codegen's ``mrvl.strided_slice``: princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateCompositeMrvlStridedSliceLayer`` (data_layout NHWC for 4-D, NC for 2-D; the attributes
are Relay's ``StridedSliceAttrs`` as ``SetCallNodeAttribute`` writes them: ``begin``, ``end``,
``strides``, ``slice_mode``), with one value per physical axis, normalised to
0 <= begin <= end <= size. The codegen ICHECKs a 2-D or 4-D input, so a token tensor's layer
is written 4-D (``nhwc_3d``: layout shapes with a trailing 1, NHWC) with a fourth begin, end,
stride of 0, 1, 1.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, present, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import MARVELL, LayerKind, ints, roles, written
from mrvl_convert.layers._lowering import new_layer


def slice_bounds(node: gs.Node) -> Tuple[List[int], List[int], List[int]]:
    """begin, end, strides of a Slice with constant inputs, per logical axis, normalised as
    numpy's slice.indices does (positive steps only: the rule admits no other)."""
    shape = static_shape(node.inputs[0])
    rank = len(shape)
    starts = const_value(node.inputs[1]).reshape(-1).tolist()
    ends = const_value(node.inputs[2]).reshape(-1).tolist()
    axes_t, steps_t = present(node, 3), present(node, 4)
    axes = const_value(axes_t).reshape(-1).tolist() if axes_t is not None else list(
        range(len(starts)))
    steps = const_value(steps_t).reshape(-1).tolist() if steps_t is not None else [1] * len(starts)
    begin, end, strides = [0] * rank, list(shape), [1] * rank
    for start, stop, axis, step in zip(starts, ends, axes, steps):
        axis = int(axis) % rank
        b, e, _ = slice(int(start), int(stop), int(step)).indices(shape[axis])
        begin[axis], end[axis], strides[axis] = b, max(b, e), int(step)
    return begin, end, strides


def lower(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("slice")
    rank = len(static_shape(node.inputs[0]))
    perm = native(rank)
    index, layout = ctx.require(node.inputs[0], perm)
    begin, end, strides = slice_bounds(node)
    out = TensorLayout(tuple(static_shape(composite.output)), perm, layout.labels)
    begin, end, strides = ([v[p] for p in perm] for v in (begin, end, strides))
    if rank == 3:  # [B, T, C] is NHWC [B, T, C, 1]: the trailing unit axis taken whole
        begin, end, strides = begin + [0], end + [1], strides + [1]
    attrs = {"begin": tuple(begin), "end": tuple(end), "strides": tuple(strides)}
    ctx.emit(new_layer(composite, "StridedSlice", [index], [layout], out, attrs),
             composite.output)


class StridedSliceKernel(Kernel):
    """out = in[b0:e0:s0, b1:e1:s1, ...] over the physical axes (a 3-D input's as 4-D NHWC)."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = tuple(spec.input_shapes[0])
        self.tokens = len(in_shape) == 3
        if self.tokens:  # sliced as the NHWC [B, T, C, 1] the codegen sees
            in_shape += (1,)
        rank = len(in_shape)
        begin, end = spec.ints("begin", rank), spec.ints("end", rank)
        strides = spec.ints("strides", rank)
        if any(s < 1 for s in strides):
            raise spec.error("attrs.strides", f"{list(strides)}: only positive strides are defined")
        if any(not 0 <= b <= e <= d for b, e, d in zip(begin, end, in_shape)):
            raise spec.error("attrs.begin", f"begin {list(begin)} and end {list(end)} are not "
                                            f"within 0 <= begin <= end <= {list(in_shape)}")
        self.index = tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))
        out = [len(range(b, e, s)) for b, e, s in zip(begin, end, strides)]
        if self.tokens and out[3] != 1:
            raise spec.error("attrs.end", f"{list(end)}: the unit axis of a token tensor "
                                          "[B, T, C, 1] must be kept whole (0:1)")
        spec.expect_shape(out[:3] if self.tokens else out)

    def run(self, x: np.ndarray) -> np.ndarray:
        if self.tokens:
            return np.ascontiguousarray(x[..., None][self.index][..., 0])
        return np.ascontiguousarray(x[self.index])

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        index = self.index[:3] if self.tokens else self.index
        starts, ends, steps = ([getattr(i, a) for i in index] for a in ("start", "stop", "step"))
        return [builder.op("Slice", [inputs[0], builder.shape(starts), builder.shape(ends),
                                     builder.shape(range(len(index))), builder.shape(steps)])]


KIND = LayerKind(
    name="StridedSlice",
    summary="out = in[begin:end:strides], one value per physical axis, 0 <= begin <= end <= size, "
            "strides >= 1",
    kernel=StridedSliceKernel,
    lower=lower,
    required_roles=roles("slice"),
    attrs=(ints("begin", "first index per physical axis"),
           ints("end", "one past the last index per physical axis"),
           ints("strides", "step per physical axis"),
           written("slice_mode", "end", "how `end` is read (Relay's StridedSliceAttrs)",
                   checked=True)),
    layer_sets=frozenset({MARVELL}),
    nhwc_3d=True,
    source="princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc CreateCompositeMrvlStridedSliceLayer",
)
