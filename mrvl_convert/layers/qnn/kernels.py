"""Simulator kernels of the elementwise int8 layers and the int8 helpers every int8 kernel
shares, in onnxruntime's number model of a QDQ model run as written.

Int8 activations flow between layers as float32 arrays holding integers in [-128, 127] (every
one exact in float16, so these kernels are ``exact``: the simulator leaves their outputs as they
are). Quantization is onnxruntime's QuantizeLinear: x / scale in float32, saturated, rounded half
to even; dequantization is q * scale in float32. An elementwise op between them (Add, Sub, Mul)
is one float32 operation per element, which numpy computes exactly as onnxruntime does; the
layers whose float op sums run it through onnxruntime itself (``sums.py``). The newer Marvell
codegen's contract (princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``SetScaleAttr``) carries only these per-tensor scales.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import numpy as np

from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel, const_broadcast_shape
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers._kind import Activation

INT8_MIN, INT8_MAX = -128.0, 127.0


def quantize(x: np.ndarray, scale: float) -> np.ndarray:
    """onnxruntime's QuantizeLinear to int8, zero point 0 (float32 in, integers as float32 out)."""
    q = np.divide(x, np.float32(scale), dtype=np.float32)
    np.clip(q, INT8_MIN, INT8_MAX, out=q)
    return np.rint(q, out=q)


def dequantize(q: np.ndarray, scale: float) -> np.ndarray:
    return np.multiply(q, np.float32(scale), dtype=np.float32)


LUT_SIZE = 256


def int_const(spec: LayerSpec, key: str, consts: Mapping[str, np.ndarray],
               dtype: type) -> np.ndarray:
    value = spec.const(key, consts)
    if value.dtype != dtype:
        raise spec.error(f"attrs.{key}", f"an int8 layer's constant must be "
                                         f"{np.dtype(dtype).name}, got {value.dtype.name}")
    return value


class FusedInt8Activation:
    """What an int8 layer applies to its int8 result: nothing, ``relu`` (max(q, 0): the QDQ
    model's Q -> DQ -> Relu -> Q at one scale) or ``LUT``: a 256-entry int8 table indexed by the
    int8 value reinterpreted as uint8 (the newer codegen's ``take`` after the layer, princekumar70
    /tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
    ``activation_type`` "LUT" with ``lut_const_name``; TVM's ``create_integer_lookup_table``
    orders the table by the uint8 bit pattern). The table is the QDQ model's own op evaluated by
    onnxruntime at conversion (``lut.py``), so the lookup is exact by construction."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray]) -> None:
        activation = spec.value("activation_type")
        self.relu = activation is Activation.RELU
        self.table: Optional[np.ndarray] = None
        if activation is Activation.LUT:
            table = int_const(spec, "lut_const_name", consts, np.int8)
            if table.size != LUT_SIZE:
                raise spec.error("attrs.lut_const_name", f"a LUT has {LUT_SIZE} entries, this "
                                                         f"one {table.size}")
            self.table = table.reshape(LUT_SIZE).astype(np.float32)
        elif activation not in (None, Activation.RELU):
            raise spec.error("attrs.activation_type", f"an int8 layer fuses relu or LUT, not "
                                                      f"{activation.value}")

    def __call__(self, q: np.ndarray) -> np.ndarray:
        if self.relu:
            return np.maximum(q, 0.0, out=q)
        if self.table is not None:
            return self.table[q.astype(np.int64) & 0xFF]
        return q


class BinaryInt8Kernel(Kernel):
    """int8 a (op) b of two activations, or of one and an int8 constant (``input_const_name``):
    both dequantized, combined in float32 and quantized (onnxruntime's op between QDQ pairs);
    optional fused relu. ``broadcast``: the second operand may broadcast into the first."""

    num_inputs = None
    exact = True
    broadcast = False

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        shapes = spec.input_shapes
        self.const: Optional[np.ndarray] = None
        if len(shapes) == 1:
            const = int_const(spec, "input_const_name", consts, np.int8)
            out = const_broadcast_shape(spec, const)
            self.const = const.astype(np.float32)
        elif len(shapes) == 2 and (shapes[0] == shapes[1] or self.broadcast):
            out = shapes[0]
        else:
            raise spec.error("inputs", f"expected 1 input and a constant, or 2 inputs of one "
                                       f"shape, got {[list(s) for s in shapes]}")
        if self.broadcast and _broadcast(out, shapes[1] if len(shapes) == 2 else out) != out:
            raise spec.error("inputs", f"the second operand {list(shapes[1])} does not "
                                       f"broadcast into the first input {list(out)}")
        spec.expect_shape(out)
        self.lhs, self.rhs = spec.value("lhs_input_scale"), spec.value("rhs_input_scale")
        self.out = spec.value("output_scale")
        self.activation = FusedInt8Activation(spec, consts)

    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def run(self, a: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
        total = self.combine(dequantize(a, self.lhs),
                             dequantize(self.const if b is None else b, self.rhs))
        return self.activation(quantize(total, self.out))


def _broadcast(a: Tuple[int, ...], b: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


class Sum2DInt8Kernel(BinaryInt8Kernel):
    """int8 elementwise add of two activations of one shape, or of one and an int8 constant."""

    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a += b
        return a


class SubInt8Kernel(BinaryInt8Kernel):
    """int8 elementwise a - b of two activations (b may broadcast into a)."""

    broadcast = True

    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a -= b
        return a


class ElementwiseEdgeKernel(Kernel):
    """A one-input elementwise int8 layer that keeps its layout (``src_layout`` =
    ``dst_layout``): checks its attributes (``capability_issue``) and its shape."""

    exact = True
    layer = "quant"

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        issue = self.capability_issue(spec.attrs)
        if issue:
            raise spec.error("attrs", issue)
        spec.expect_shape(spec.input_shapes[0])

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        if attrs.get("src_layout") != attrs.get("dst_layout"):
            return f"a {cls.layer} layer that also changes the layout is not supported"
        return None


class QuantKernel(ElementwiseEdgeKernel):
    """A region edge: ``output_scale`` quantizes float32 to int8, ``input_scale`` dequantizes.

    ``exact``: the int8 values are exact in float16, and a dequantized output is handed on in
    float32, as onnxruntime's DequantizeLinear gives it.
    """

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.to_int8 = "output_scale" in spec.attrs
        self.scale = spec.value("output_scale" if self.to_int8 else "input_scale")

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        if ("output_scale" in attrs) == ("input_scale" in attrs):
            return "a quant layer has exactly one of output_scale (quantize) and input_scale " \
                   "(dequantize)"
        return super().capability_issue(attrs)

    def run(self, x: np.ndarray) -> np.ndarray:
        return quantize(x, self.scale) if self.to_int8 else dequantize(x, self.scale)
