"""Simulator kernels of the int8 layers (``qnn.py``), in onnxruntime's number model.

Int8 activations flow between layers as float32 arrays holding integers in [-128, 127] (every
one exact in float16, so these kernels are ``exact``: the simulator leaves their outputs as they
are). Integer products are summed in float64, where every partial sum of int8 x int8 products is
an exact integer, so the int32 accumulator is exact whatever order the matrix product takes.

Requantization is onnxruntime's (``MlasRequantizeOutput``, QLinearConv / QLinearMatMul):
float32(acc) times the float32 multiplier input_scale * weight_scale / output_scale, saturated to
[-128, 127] and rounded half to even. Quantization is onnxruntime's QuantizeLinear: x / scale in
float32, saturated, rounded half to even; dequantization is q * scale in float32. The newer
Marvell codegen's contract (princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``SetScaleAttr``) carries only these per-tensor scales.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import numpy as np

from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel, const_broadcast_shape
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers._kind import Activation
from mrvl_convert.layers.conv2d import Conv2DKernel
from mrvl_convert.layers.pool import Avgpool2DKernel, GlobalAvgpool2DKernel

INT8_MIN, INT8_MAX = -128.0, 127.0


def quantize(x: np.ndarray, scale: float) -> np.ndarray:
    """onnxruntime's QuantizeLinear to int8, zero point 0 (float32 in, integers as float32 out)."""
    q = np.divide(x, np.float32(scale), dtype=np.float32)
    np.clip(q, INT8_MIN, INT8_MAX, out=q)
    return np.rint(q, out=q)


def dequantize(q: np.ndarray, scale: float) -> np.ndarray:
    return np.multiply(q, np.float32(scale), dtype=np.float32)


class Requantize:
    """int32 accumulator -> int8 output, with an optional fused relu (max(q, 0): the scale is
    the same before and after it)."""

    def __init__(self, spec: LayerSpec, weight_key: str = "weight_scale") -> None:
        product = np.float32(spec.value("input_scale")) * np.float32(spec.value(weight_key))
        self.multiplier = np.float32(product / np.float32(spec.value("output_scale")))
        self.relu = spec.value("activation_type") is Activation.RELU

    def __call__(self, acc: np.ndarray) -> np.ndarray:
        y = acc.astype(np.float32)
        y *= self.multiplier
        np.clip(y, 0.0 if self.relu else INT8_MIN, INT8_MAX, out=y)
        return np.rint(y, out=y)


def int_const(spec: LayerSpec, key: str, consts: Mapping[str, np.ndarray],
               dtype: type) -> np.ndarray:
    value = spec.const(key, consts)
    if value.dtype != dtype:
        raise spec.error(f"attrs.{key}", f"an int8 layer's constant must be "
                                         f"{np.dtype(dtype).name}, got {value.dtype.name}")
    return value


def _bias(spec: LayerSpec, consts: Mapping[str, np.ndarray], o: int) -> np.ndarray:
    bias = int_const(spec, "bias_const_name", consts, np.int32)
    if bias.size != o:
        raise spec.error("attrs.bias_const_name", f"bias has {bias.size} values, expected {o}")
    return bias.reshape(o).astype(np.float64)


class Conv2DInt8Kernel(Conv2DKernel):
    """int8 NHWC convolution (OHWI int8 kernel, int32 bias), requantized to output_scale."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        Kernel.__init__(self, spec, consts, gemm)
        c = self._read_geometry()
        if self.groups != 1:
            raise spec.error("attrs.groups", "an int8 Conv2D is an ordinary convolution "
                                             "(depthwise and grouped kernels are expanded)")
        kernel = int_const(spec, "kernel_const_name", consts, np.int8)
        o = self._take_kernel(kernel, c)
        kh, kw = self.kernel_hw
        self.pointwise = (kh == kw == 1 and not any(self.pads))
        # [KH*KW*I, O]: the (kh, kw, c) order of an NHWC window flattened (as Conv2DKernel).
        self.weights = kernel.reshape(o, -1).T.astype(np.float64)
        self.bias = _bias(spec, consts, o)
        self.requantize = Requantize(spec)

    def run(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[0]
        acc = self._columns(x).astype(np.float64) @ self.weights
        acc += self.bias
        return self.requantize(acc).reshape(n, *self.out_hw, self.out_channels)


class FCInt8Kernel(Kernel):
    """int8 fully connected (OI int8 kernel, int32 bias), requantized to output_scale."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, i = spec.input_rank(0, 2)
        weight = int_const(spec, "kernel_const_name", consts, np.int8)
        if weight.ndim != 2 or weight.shape[1] != i:
            raise spec.error("attrs.kernel_const_name", f"kernel has shape {list(weight.shape)}"
                                                        f", expected [O, {i}] (OI)")
        spec.value("kernel_layout")
        o = weight.shape[0]
        spec.expect_shape((n, o))
        self.weights = weight.T.astype(np.float64)
        self.bias = _bias(spec, consts, o)
        self.requantize = Requantize(spec)

    def run(self, x: np.ndarray) -> np.ndarray:
        acc = x.astype(np.float64) @ self.weights
        acc += self.bias
        return self.requantize(acc)


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
        self.relu = spec.value("activation_type") is Activation.RELU

    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def run(self, a: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
        total = self.combine(dequantize(a, self.lhs),
                             dequantize(self.const if b is None else b, self.rhs))
        q = quantize(total, self.out)
        return np.maximum(q, 0.0, out=q) if self.relu else q


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


class Avgpool2DInt8Kernel(Avgpool2DKernel):
    """int8 average pooling: dequantized, summed window by window in float32, divided by the
    count and quantized to output_scale (onnxruntime's QLinearAveragePool with its int8 zero
    point 0; on x86 onnxruntime first turns int8 into uint8 and adds that zero point, 128, in
    float32 before rounding, which settles some near-ties the other way: one step)."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.scales = (spec.value("input_scale"), spec.value("output_scale"))

    def run(self, x: np.ndarray) -> np.ndarray:
        return quantize(super().run(dequantize(x, self.scales[0])), self.scales[1])


class GlobalAvgpool2DInt8Kernel(GlobalAvgpool2DKernel):
    """int8 global average pooling: the int32 sum over H and W requantized by
    input_scale / (output_scale * H * W) (onnxruntime's QLinearGlobalAveragePool)."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        _, h, w, _ = spec.input_shapes[0]
        size = np.float32(spec.value("output_scale")) * np.float32(h * w)
        self.multiplier = np.float32(np.float32(spec.value("input_scale")) / size)

    def run(self, x: np.ndarray) -> np.ndarray:
        y = x.sum(axis=(1, 2), keepdims=True, dtype=np.float64).astype(np.float32)
        y *= self.multiplier
        np.clip(y, INT8_MIN, INT8_MAX, out=y)
        return np.rint(y, out=y)


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
