"""BatchMatmul: matrix product over the last two axes of 3-D or 4-D tensors (numpy broadcasting
over the leading axes), of two activations or of an activation and a constant.

Matched from ONNX ``MatMul`` of rank 3 or 4 (a 2-D constant weight is FC, also on a 3-D token
tensor). Compute-heavy: a region with a BatchMatmul stays on the accelerator. The contract
is the newer Marvell codegen's ``mrvl.batch_matmul``: princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateCompositeMrvlBatchMatmulLayer``: ``data_layout`` / ``out_layout`` NCHW, every layout
shape padded to 4-D with leading 1s (``data_layout_shape_<i>`` per activation input), a
constant second operand as ``input_const_name`` + ``input_const_shape``; no Relay attributes
are written, so the second operand is stored as it multiplies: ``[..., K, N]``.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, default_labels, identity
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.fp16 import fp16_const
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import MARVELL, Attr, Const, LayerKind, roles, written
from mrvl_convert.layers._lowering import new_layer


def lead4(shape: Sequence[int]) -> List[int]:
    """A shape padded to 4-D with leading 1s, as the codegen's ``convert_layout`` does."""
    return [1] * (4 - len(shape)) + list(shape)


def lower(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("matmul")
    a, b = node.inputs[0], node.inputs[1]
    index, layout = ctx.require(a, identity(len(static_shape(a))))
    indices, layouts, consts = [index], [layout], []
    attrs = {"data_layout_shape": tuple(lead4(layout.shape))}
    if is_const(b):
        value = np.ascontiguousarray(const_value(b).astype(np.float32))
        consts.append(("operand", value))
        attrs["input_const_shape"] = tuple(lead4(value.shape))
    else:
        index_b, layout_b = ctx.require(b, identity(len(static_shape(b))))
        indices.append(index_b)
        layouts.append(layout_b)
        attrs["data_layout_shape_0"] = attrs["data_layout_shape"]
        attrs["data_layout_shape_1"] = tuple(lead4(layout_b.shape))
    out_shape = tuple(static_shape(composite.output))
    attrs["out_layout_shape"] = tuple(lead4(out_shape))
    out = TensorLayout(out_shape, identity(len(out_shape)), default_labels(len(out_shape)))
    ctx.emit(new_layer(composite, "BatchMatmul", indices, layouts, out, attrs, consts),
             composite.output)


class BatchMatmulKernel(Kernel):
    """out = np.matmul(in0, in1 or the constant), float32 products of fp16 values."""

    num_inputs = None

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        shapes = spec.input_shapes
        self.const: Optional[np.ndarray] = None
        if len(shapes) == 1:
            self.const = fp16_const(spec, "input_const_name",
                                    spec.const("input_const_name", consts))
            other = self.const.shape
        elif len(shapes) == 2:
            other = shapes[1]
        else:
            raise spec.error("inputs", f"expected 1 input (+ constant) or 2, got {len(shapes)}")
        spec.expect_shape(_product_shape(spec, tuple(shapes[0]), tuple(other)))

    def run(self, a: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
        return np.matmul(a, self.const if b is None else b)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX MatMul, whose broadcasting of the leading axes is numpy's ``matmul``'s; a
        constant operand is the kernel's fp16-rounded one."""
        other = inputs[1] if self.const is None else builder.constant(self.const, "w")
        return [builder.op("MatMul", [inputs[0], other])]

    def passes_nonfinite(self, index: int) -> bool:
        """Every value of either operand multiplies a whole row or column of the other into a
        sum (inf * 0 is NaN), and the shared axis K is never empty."""
        return True


def _product_shape(spec: LayerSpec, a: Sequence[int], b: Sequence[int]) -> Sequence[int]:
    """np.matmul's output shape, or the layer's error (numpy broadcasting of leading axes)."""
    problem = f"{list(a)} and {list(b)} do not multiply as matrices"
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise spec.error("inputs", problem)
    try:
        lead = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    except ValueError:
        raise spec.error("inputs", problem) from None
    return (*lead, a[-2], b[-1])


def _shape_attr(name: str, doc: str) -> Attr:
    return Attr(name, "ints", doc, default=None)


KIND = LayerKind(
    name="BatchMatmul",
    summary="out = np.matmul(in0, in1), or in0 times the constant `input_const_name` "
            "([..., K, N]); layout shapes padded to 4-D with leading 1s",
    kernel=BatchMatmulKernel,
    lower=lower,
    required_roles=roles("matmul"),
    attrs=(written("data_layout", "NCHW", "as the codegen writes it for BatchMatmul"),
           written("out_layout", "NCHW", "as the codegen writes it for BatchMatmul"),
           _shape_attr("data_layout_shape", "input 0's shape, 4-D with leading 1s"),
           _shape_attr("out_layout_shape", "the output's shape, 4-D with leading 1s"),
           _shape_attr("data_layout_shape_0", "input 0's shape (two activation inputs)"),
           _shape_attr("data_layout_shape_1", "input 1's shape (two activation inputs)"),
           _shape_attr("input_const_shape", "the constant's shape, 4-D with leading 1s")),
    consts=(Const("operand", "input", "the constant second operand, if any", required=False),),
    # Beyond the newer mrvl.py, whose IsComputeIntensiveGraph counts only conv2d(_transpose)
    # and dense: attention's products of two activations (Q.K^T, weights.V) are matrix
    # products as heavy as an FC's, and a transformer region is worth the trip for them.
    compute_heavy=True,
    layer_sets=frozenset({MARVELL}),
    source="princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc CreateCompositeMrvlBatchMatmulLayer",
)
