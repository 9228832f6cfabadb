"""Simulator kernels of the int8 layers whose float op sums: Conv2D, FC, Avgpool2D,
GlobalAvgpool2D and ReduceMean, each onnxruntime's own float op between the layer's
DequantizeLinear and QuantizeLinear (``as_written.py``: why onnxruntime), then the fused
activation on the int8 result.

The fused activation is ``kernels.FusedInt8Activation``: relu, or a LUT (the newer codegen's
``take`` after a Conv2D or FC: princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``CreateCompositeMrvlQnnConv2DLayer``,
``CreateCompositeMrvlQnnFcLayer``).

Bias: the QDQ model dequantizes the int32 bias with ``input_scale x weight_scale`` in float32
(onnxruntime's quantizer writes that product); the Nodes-JSON carries the two factors, as the
codegen does, and the kernel forms the product the same way. A model whose bias scale is
another float (allowed by the rules within 1e-5) is named in report.json (``int8_forms``).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers.conv2d import Conv2DKernel, diagonal_blocks, diagonal_groups
from mrvl_convert.layers.pool import Avgpool2DKernel, GlobalAvgpool2DKernel
from mrvl_convert.layers.qnn.as_written import QdqOp
from mrvl_convert.layers.qnn.kernels import FusedInt8Activation, int_const

NCHW_FROM_NHWC = (0, 3, 1, 2)
NHWC_FROM_NCHW = (0, 2, 3, 1)


def _scales(spec: LayerSpec) -> "tuple[float, float, float]":
    return (spec.value("input_scale"), spec.value("weight_scale"), spec.value("output_scale"))


def _bias(spec: LayerSpec, consts: Mapping[str, np.ndarray], o: int) -> np.ndarray:
    bias = int_const(spec, "bias_const_name", consts, np.int32)
    if bias.size != o:
        raise spec.error("attrs.bias_const_name", f"bias has {bias.size} values, expected {o}")
    return bias.reshape(o)


def _bias_scale(input_scale: float, weight_scale: float) -> float:
    return float(np.float32(input_scale) * np.float32(weight_scale))


class Conv2DInt8Kernel(Conv2DKernel):
    """int8 NHWC convolution (OHWI int8 kernel, int32 bias): onnxruntime's Conv of the
    dequantized values, quantized to output_scale. A depthwise or grouped convolution is
    written expanded (block-diagonal, as the int8 codegen writes it); it runs grouped again,
    as the QDQ model's Conv does (MLAS sums a depthwise window in another order than an
    ordinary convolution with zeros)."""

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
        groups = diagonal_groups(kernel)
        grouped = np.concatenate(diagonal_blocks(kernel, groups)) if groups > 1 else kernel
        s_in, s_w, s_out = _scales(spec)
        n, h, w, _ = spec.input_shapes[0]
        kh, kw = self.kernel_hw
        attrs = {"kernel_shape": [kh, kw], "strides": list(self.strides),
                 "pads": list(self.pads), "dilations": list(self.dilation), "group": groups}
        weights = [(np.ascontiguousarray(grouped.transpose(0, 3, 1, 2)), s_w),
                   (_bias(spec, consts, o), _bias_scale(s_in, s_w))]
        self.op = QdqOp("Conv", [((n, c, h, w), s_in)], s_out, attrs, weights)
        self.activation = FusedInt8Activation(spec, consts)

    def run(self, x: np.ndarray) -> np.ndarray:
        q = self.op(x.transpose(NCHW_FROM_NHWC))
        return self.activation(np.ascontiguousarray(q.transpose(NHWC_FROM_NCHW)))


class FCInt8Kernel(Kernel):
    """int8 fully connected (OI int8 kernel, int32 bias): onnxruntime's Gemm (transB) of the
    dequantized values, quantized to output_scale (a MatMul, a Gemm with or without bias and
    either transB sum alike in MLAS). A 3-D token input ``[B, T, I]`` runs on its ``[B*T, I]``
    view, one row per token: onnxruntime's MatMul of a 3-D input by a 2-D weight is that one
    product too (its rows folded into M), so the QDQ model's MatMul is computed exactly."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = spec.input_shapes[0]
        if len(in_shape) not in (2, 3):
            raise spec.error("inputs", f"input 0 has physical shape {list(in_shape)}, "
                                       "expected rank 2 or 3")
        i = in_shape[-1]
        weight = int_const(spec, "kernel_const_name", consts, np.int8)
        if weight.ndim != 2 or weight.shape[1] != i:
            raise spec.error("attrs.kernel_const_name", f"kernel has shape {list(weight.shape)}"
                                                        f", expected [O, {i}] (OI)")
        spec.value("kernel_layout")
        o = weight.shape[0]
        self.rows = (*in_shape[:-1], o)
        spec.expect_shape(self.rows)
        s_in, s_w, s_out = _scales(spec)
        weights = [(np.ascontiguousarray(weight), s_w),
                   (_bias(spec, consts, o), _bias_scale(s_in, s_w))]
        view = (int(np.prod(in_shape[:-1])), i)
        self.op = QdqOp("Gemm", [(view, s_in)], s_out, {"transB": 1}, weights)
        self.activation = FusedInt8Activation(spec, consts)

    def run(self, x: np.ndarray) -> np.ndarray:
        q = self.op(x.reshape(-1, x.shape[-1])).reshape(self.rows)
        return self.activation(q)


class Avgpool2DInt8Kernel(Avgpool2DKernel):
    """int8 average pooling: onnxruntime's AveragePool of the dequantized values, quantized to
    output_scale."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, h, w, c = spec.input_shapes[0]
        attrs = {"kernel_shape": list(self.kernel_hw), "strides": list(self.strides),
                 "pads": list(self.explicit_pads), "ceil_mode": int(spec.value("ceil_mode")),
                 "count_include_pad": int(spec.value("count_include_pad"))}
        if self.dilation != (1, 1):
            raise spec.error("attrs.dilation", "an int8 average pool is not dilated")
        self.op = QdqOp("AveragePool", [((n, c, h, w), spec.value("input_scale"))],
                        spec.value("output_scale"), attrs)

    def run(self, x: np.ndarray) -> np.ndarray:
        q = self.op(x.transpose(NCHW_FROM_NHWC))
        return np.ascontiguousarray(q.transpose(NHWC_FROM_NCHW))


class GlobalAvgpool2DInt8Kernel(GlobalAvgpool2DKernel):
    """int8 global average pooling: onnxruntime's GlobalAveragePool of the dequantized values,
    quantized to output_scale."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, h, w, c = spec.input_shapes[0]
        self.op = QdqOp("GlobalAveragePool", [((n, c, h, w), spec.value("input_scale"))],
                        spec.value("output_scale"), {})

    def run(self, x: np.ndarray) -> np.ndarray:
        q = self.op(x.transpose(NCHW_FROM_NHWC))
        return np.ascontiguousarray(q.transpose(NHWC_FROM_NCHW))


class ReduceMeanInt8Kernel(Kernel):
    """int8 mean over one axis: onnxruntime's ReduceMean of the dequantized values over the
    model's own (NCHW) axis, where its summation order is the QDQ model's, quantized to
    output_scale; the input and output in the layer's physical order."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, h, w, c = spec.input_rank(0, 4)
        axis, keep = spec.value("axis"), spec.value("keepdims")
        if axis not in (1, 3):
            raise spec.error("attrs.axis", f"an int8 ReduceMean reduces NHWC axis 1 or 3, not "
                                           f"{axis}")
        logical = NHWC_FROM_NCHW[axis]
        out = [1 if i == axis else d for i, d in enumerate((n, h, w, c))]
        spec.expect_shape(out if keep else out[:axis] + out[axis + 1:])
        remaining = [a for a in range(4) if a != logical]
        physical = [a for a in NHWC_FROM_NCHW if a != logical]
        self.back = NHWC_FROM_NCHW if keep else tuple(remaining.index(a) for a in physical)
        self.op = QdqOp("ReduceMean", [((n, c, h, w), spec.value("input_scale"))],
                        spec.value("output_scale"), {"axes": [logical], "keepdims": int(keep)})

    def run(self, x: np.ndarray) -> np.ndarray:
        q = self.op(x.transpose(NCHW_FROM_NHWC))
        return np.ascontiguousarray(q.transpose(self.back))
