"""Concat: concatenation of activations along one physical axis (the channel axis).

The contract is upstream TVM v0.19's ``mrvl.concat`` (``src/relay/backend/contrib/mrvl/codegen.cc``).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import activation_inputs, attr, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import Attr, LayerKind, roles
from mrvl_convert.layers._lowering import new_layer


def lower(composite: Composite, ctx: LayoutContext) -> None:
    concat = composite.binding.node("concat")
    rank = len(static_shape(concat.outputs[0]))
    perm = native(rank)
    pairs = [ctx.require(t, perm) for t in activation_inputs(concat)]
    axis = int(attr(concat, "axis", 1)) % rank
    out = TensorLayout(tuple(static_shape(composite.output)), perm, pairs[0][1].labels)
    ctx.emit(new_layer(composite, "Concat", [p[0] for p in pairs], [p[1] for p in pairs], out,
                       {"axis": perm.index(axis)}), composite.output)


class ConcatKernel(Kernel):
    """np.concatenate along the physical axis ``axis``."""

    num_inputs = None
    exact = True
    keeps_every_value = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        shapes = spec.input_shapes
        rank = len(shapes[0])
        axis = spec.value("axis")
        if not -rank <= axis < rank:
            raise spec.error("attrs.axis", f"{axis} is out of range for rank {rank}")
        self.axis = axis % rank
        for k, shape in enumerate(shapes):
            rest = [d for i, d in enumerate(shape) if i != self.axis]
            ref = [d for i, d in enumerate(shapes[0]) if i != self.axis]
            if len(shape) != rank or rest != ref:
                raise spec.error("inputs", f"input {k} shape {list(shape)} does not concatenate "
                                           f"with {list(shapes[0])} on axis {self.axis}")
        out = list(shapes[0])
        out[self.axis] = sum(s[self.axis] for s in shapes)
        spec.expect_shape(out)

    def run(self, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=self.axis)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("Concat", list(inputs), axis=self.axis)]


KIND = LayerKind(
    name="Concat",
    summary="np.concatenate along the physical axis `axis`",
    kernel=ConcatKernel,
    lower=lower,
    required_roles=roles("concat"),
    attrs=(Attr("axis", "int", "the physical axis (3, channels, for NHWC)"),),
    quantizable=True,
    source="apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc",
)
