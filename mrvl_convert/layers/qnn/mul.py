"""The int8 form of Mul2D: ``DequantizeLinear -> Mul -> QuantizeLinear`` of two int8 activations
(the second may broadcast into the first: a squeeze-excite gate) or of one and an int8 constant.

The newer codegen writes it in ``CreateCompositeMrvlQnnMulLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc):
``lhs_input_scale``, ``rhs_input_scale`` and ``output_scale`` from qnn.mul's args 2, 4 and 6,
``activation_type`` relu for a following ``maximum`` (a fused Relu), R4
(``resizeInputOutputLayoutTo4dim``, a constant as ``input_const_name``); its mrvl.py pattern
``qnn_mul_pattern`` takes an optional ``qnn.requantize`` after it.

Number model (``Mul2DInt8Kernel``): onnxruntime's Mul between QDQ pairs run as the model writes it:
both operands dequantized (q * scale in float32), multiplied in float32, quantized (x / scale in
float32, rounded half to even, saturated); a fused Relu is max(q, 0).
"""
from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.core.graph import producer, scale_of
from mrvl_convert.layers._lowering import new_layer
from mrvl_convert.layers.qnn import lut
from mrvl_convert.layers.qnn.kernels import BinaryInt8Kernel
from mrvl_convert.layers.qnn.requant import emit_with_requant


def int8_operands(node: gs.Node, ctx: LayoutContext
                  ) -> Tuple[List[gs.Node], List[int], List[TensorLayout], List[Tuple[str, Any]]]:
    """The DequantizeLinears of a binary op's operands, lhs first (the activation of the
    output's shape), and the lhs and an rhs activation in the output's physical order, or the
    rhs int8 constant padded to the output's rank in that order."""
    out_shape = static_shape(node.outputs[0])
    rank, perm = len(out_shape), native(len(out_shape))
    dequantized = sorted((producer(t) for t in node.inputs),
                         key=lambda dq: (is_const(dq.inputs[0]),
                                         static_shape(dq.outputs[0]) != out_shape))
    indices, layouts, consts = [], [], []
    for dq in dequantized:
        if is_const(dq.inputs[0]):
            value = const_value(dq.inputs[0]).astype(np.int8)
            value = value.reshape([1] * (rank - value.ndim) + list(value.shape)).transpose(perm)
            consts.append(("operand", np.ascontiguousarray(value)))
        else:
            index, layout = ctx.require(dq.inputs[0], perm)
            indices.append(index)
            layouts.append(layout)
    return dequantized, indices, layouts, consts


def lower(composite: Composite, ctx: LayoutContext) -> None:
    mul = composite.binding.node("mul")
    dequantized, indices, layouts, consts = int8_operands(mul, ctx)
    activation, fused_consts = lut.fused(composite)
    attrs = {"activation_type": activation,
             "lhs_input_scale": scale_of(dequantized[0]),
             "rhs_input_scale": scale_of(dequantized[1]),
             "output_scale": scale_of(composite.binding.node("out_q"))}
    out = TensorLayout(tuple(static_shape(composite.output)), layouts[0].perm, layouts[0].labels)
    emit_with_requant(composite, ctx, new_layer(composite, "Mul2D", indices, layouts, out, attrs,
                                                consts + fused_consts))


class Mul2DInt8Kernel(BinaryInt8Kernel):
    """int8 a * b (b, an input or the int8 constant, broadcast into a), in float32 between
    dequantization and quantization; optional fused relu."""

    broadcast = True

    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.multiply(a, b, dtype=np.float32)
