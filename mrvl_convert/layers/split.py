"""Split: an activation cut along one physical axis into several outputs (a multi-output layer).

The contract is the newer Marvell codegen's ``mrvl.split``: princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateMrvlSplitLayer``: one input, ``axis`` (the physical axis, NHWC for 4-D, NC for 2-D),
and, through ``SetMrvlLayerCommonAttrs``, ``num_outputs`` and one ``out_layout_shape_<i>`` per
output, which give the sizes of the pieces. A consumer reads output ``i`` as the entry
``[split, i, 0]`` with ``from_tuple_idx`` ``i`` (a TupleGetItem in the codegen's input).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.core.graph import attr, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import MARVELL, Attr, LayerKind, roles
from mrvl_convert.layers._lowering import new_layer


def lower(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("split")
    rank = len(static_shape(node.inputs[0]))
    perm = native(rank)
    index, layout = ctx.require(node.inputs[0], perm)
    axis = int(attr(node, "axis", 0)) % rank
    outs = [TensorLayout(tuple(static_shape(t)), perm, layout.labels) for t in node.outputs]
    layer = new_layer(composite, "Split", [index], [layout], outs[0], {"axis": perm.index(axis)})
    layer.extra_outputs = outs[1:]
    ctx.emit_multi(layer, node.outputs)


class SplitKernel(Kernel):
    """The input cut along physical axis ``axis`` into pieces of the output shapes' sizes."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = spec.input_shapes[0]
        rank = len(in_shape)
        axis = spec.value("axis")
        if not 0 <= axis < rank:
            raise spec.error("attrs.axis", f"{axis} is out of range for rank {rank}")
        outs = spec.out_shapes or (spec.shape,)
        for k, shape in enumerate(outs):
            rest = [d for i, d in enumerate(shape) if i != axis]
            if len(shape) != rank or rest != [d for i, d in enumerate(in_shape) if i != axis]:
                raise spec.error("shape", f"output {k} shape {list(shape)} is not a piece of "
                                          f"input {list(in_shape)} along axis {axis}")
        if sum(s[axis] for s in outs) != in_shape[axis]:
            raise spec.error("shape", f"the outputs' sizes {[s[axis] for s in outs]} along axis "
                                      f"{axis} do not add up to the input's {in_shape[axis]}")
        self.axis = axis
        self.bounds = np.cumsum([s[axis] for s in outs])[:-1].tolist()

    def run(self, x: np.ndarray) -> Tuple[np.ndarray, ...]:
        return tuple(np.ascontiguousarray(p) for p in np.split(x, self.bounds, axis=self.axis))

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        sizes = [s[self.axis] for s in (self.spec.out_shapes or (self.spec.shape,))]
        return builder.ops("Split", [inputs[0], builder.shape(sizes)], len(sizes), axis=self.axis)


KIND = LayerKind(
    name="Split",
    summary="the input cut along the physical axis `axis` into `num_outputs` pieces whose sizes "
            "are the outputs' shapes (`out_layout_shape_<i>`); output i is the entry [split, i, 0]",
    kernel=SplitKernel,
    lower=lower,
    required_roles=roles("split"),
    attrs=(Attr("axis", "int", "the physical axis (3, channels, for NHWC)"),),
    layer_sets=frozenset({MARVELL}),
    source="princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc CreateMrvlSplitLayer",
)
