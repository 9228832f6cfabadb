"""QnnSigmoid and QnnTanh: the int8 forms of Sigmoid and Tanh, from ``DequantizeLinear -> Sigmoid
(Tanh) -> QuantizeLinear``.

The newer codegen gives them layer names of their own: ``CreateCompositeMrvlActivationLayer``
(princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc) turns composite ``mrvl.qnn_sigmoid`` into layer
``QnnSigmoid`` and ``mrvl.qnn_tanh`` into ``QnnTanh``, with ``input_scale`` and ``output_scale``
(qnn.sigmoid / qnn.tanh args 1 and 3) and the activations' layout (2-D ``NC``, else R4). No
lookup table: the codegen writes ``activation_type`` LUT with a ``lut_const_name`` only for a
``take`` fused after a Conv2D, FC, Sum2D or Mul2D (a table its own calibration flow builds),
never for these layers.

Number model: what onnxruntime computes for the QDQ chain, the float function of the dequantized
value, quantized: out = saturate(round_half_even(f(q * input_scale) / output_scale)). Every int8
input has one output, so the kernel builds a 256-entry table at compile time by running that
chain through onnxruntime itself (``as_written.py``): its own Sigmoid and Tanh, whose float32
results numpy's differ from by an ulp (a step at near-ties), so the table is exact by
construction.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from mrvl_convert.ir.layout import LayoutContext
from mrvl_convert.ir.match import Composite
from mrvl_convert.core.graph import scale_of
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers._kind import Attr, LayerKind, roles
from mrvl_convert.layers._unary import ONLY_MARVELL, SOURCE, emit_unary
from mrvl_convert.layers.qnn.as_written import QdqOp
from mrvl_convert.layers.qnn.kernels import INT8_MAX, INT8_MIN

_ATTRS = (Attr("input_scale", "float", "int8: scale of the input"),
          Attr("output_scale", "float", "int8: scale of the output"))


class _TableKernel(Kernel):
    """out = table[in + 128], the table onnxruntime's quantized float function of every int8
    value."""

    exact = True
    op_type = ""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        spec.expect_shape(spec.input_shapes[0])
        values = np.arange(-128, 128, dtype=np.float32)
        chain = QdqOp(self.op_type, [((values.size,), spec.value("input_scale"))],
                      spec.value("output_scale"), {})
        self.table = chain(values)

    def run(self, x: np.ndarray) -> np.ndarray:
        # The input is int8 already; clipping only keeps a crafted float input in the table.
        index = np.clip(np.nan_to_num(x), INT8_MIN, INT8_MAX) - INT8_MIN
        return self.table[np.rint(index).astype(np.intp)]


class QnnSigmoidKernel(_TableKernel):
    op_type = "Sigmoid"


class QnnTanhKernel(_TableKernel):
    op_type = "Tanh"


def _lowering(kind: str, role: str) -> Callable[[Composite, LayoutContext], None]:
    """qnn.lower has aliased the DequantizeLinear's output to its int8 input already."""
    def lower(composite: Composite, ctx: LayoutContext) -> None:
        node = composite.binding.node(role)
        attrs = {"input_scale": scale_of(composite.binding.node("in_dq")),
                 "output_scale": scale_of(composite.binding.node("out_q"))}
        emit_unary(composite, ctx, kind, node.inputs[0], attrs, composite.output)
    return lower


def _kind(name: str, role: str, formula: str, kernel: type) -> LayerKind:
    return LayerKind(
        name=name,
        summary=f"int8: out = saturate(round_half_even({formula}(in * input_scale) / "
                f"output_scale))",
        kernel=kernel,
        lower=_lowering(name, role),
        required_roles=roles(role, "in_dq", "out_q"),
        attrs=_ATTRS,
        layer_sets=ONLY_MARVELL,
        r4=ONLY_MARVELL,
        r4_keeps_2d=True,
        source=SOURCE,
    )


QNN_SIGMOID = _kind("QnnSigmoid", "sigmoid", "sigmoid", QnnSigmoidKernel)
QNN_TANH = _kind("QnnTanh", "tanh", "tanh", QnnTanhKernel)
