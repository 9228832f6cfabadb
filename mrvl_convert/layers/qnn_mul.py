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

from typing import Mapping, Optional

import numpy as np

from .._graph import const_value, is_const, static_shape
from ..layout import LayoutContext, TensorLayout, native
from ..rules.matcher import Composite
from ..rules.qnn_checks import producer, scale_of
from ..runtime.gemm import NUMPY_GEMM, GemmEngine
from ..runtime.kernel_base import Kernel
from ..runtime.layerspec import LayerSpec
from ._kind import Activation
from ._lowering import new_layer
from .qnn_kernels import dequantize, int_const, quantize
from .qnn_requant import emit_with_requant


def lower(composite: Composite, ctx: LayoutContext) -> None:
    """lhs: the activation of the output's shape; rhs: the other activation (broadcast into the
    lhs) or the int8 constant, padded to the output's rank in its physical order."""
    mul = composite.binding.node("mul")
    out_shape = static_shape(mul.outputs[0])
    rank, perm = len(out_shape), native(len(out_shape))
    dequantized = sorted((producer(t) for t in mul.inputs),
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
    act = composite.binding.node("act")
    attrs = {"activation_type": Activation.RELU if act is not None else None,
             "lhs_input_scale": scale_of(dequantized[0]),
             "rhs_input_scale": scale_of(dequantized[1]),
             "output_scale": scale_of(composite.binding.node("out_q"))}
    out = TensorLayout(tuple(static_shape(composite.output)), perm, layouts[0].labels)
    emit_with_requant(composite, ctx, new_layer(composite, "Mul2D", indices, layouts, out, attrs,
                                                consts))


class Mul2DInt8Kernel(Kernel):
    """int8 a * b (b, an input or the int8 constant, broadcast into a), in float32 between
    dequantization and quantization; optional fused relu."""

    num_inputs = None
    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        shapes = spec.input_shapes
        self.const: Optional[np.ndarray] = None
        if len(shapes) == 1:
            self.const = int_const(spec, "input_const_name", consts, np.int8).astype(np.float32)
            other = self.const.shape
        elif len(shapes) == 2:
            other = shapes[1]
        else:
            raise spec.error("inputs", f"expected 1 input and a constant, or 2 inputs, got "
                                       f"{len(shapes)}")
        try:
            out = np.broadcast_shapes(shapes[0], other)
        except ValueError:
            out = None
        if out != tuple(shapes[0]):
            raise spec.error("inputs", f"the second operand {list(other)} does not broadcast "
                                       f"into the first input {list(shapes[0])}")
        spec.expect_shape(shapes[0])
        self.scales = (spec.value("lhs_input_scale"), spec.value("rhs_input_scale"),
                       spec.value("output_scale"))
        self.relu = spec.value("activation_type") is Activation.RELU

    def run(self, a: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
        product = dequantize(a, self.scales[0])
        product *= dequantize(self.const if b is None else b, self.scales[1])
        q = quantize(product, self.scales[2])
        return np.maximum(q, 0.0, out=q) if self.relu else q
