"""int8 Conv2DTranspose: ``DequantizeLinear -> ConvTranspose (int8 weight, int32 bias, each
dequantized) -> QuantizeLinear`` (rules/marvell/qnn.yaml ``mrvl.qnn_conv2d_transpose``).

The newer codegen has a float ``mrvl.conv2d_transpose`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateCompositeMrvlConv2DTransposeLayer``) and no int8 one; the layer here is that kind with
the int8 attributes its Conv2D carries (``input_scale``, ``weight_scale``, ``output_scale``;
int8 OHWI kernel, int32 bias dequantized with input_scale x weight_scale), the form the reference
table gives the transposed convolution ("as Conv2D"). A grouped one is written as the float
kind writes it, groups 1 with a block-diagonal kernel; the simulator runs it grouped again (the
most diagonal blocks the kernel has, as the int8 Conv2D does), the QDQ model's own op.

Number model: onnxruntime's own ConvTranspose between the layer's DequantizeLinear and
QuantizeLinear (``as_written.py``: why onnxruntime), then the fused activation on the int8 result
(``kernels.FusedInt8Activation``): exact against onnxruntime's run of the QDQ model.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from mrvl_convert.core.graph import attr, const_value, present, producer, scale_of
from mrvl_convert.ir.layout import NHWC, LayoutContext
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.conv_weights import block_diagonal, diagonal_blocks, diagonal_groups
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers._lowering import new_layer, spatial_out
from mrvl_convert.layers.qnn import lut
from mrvl_convert.layers.qnn.as_written import QdqOp
from mrvl_convert.layers.qnn.kernels import FusedInt8Activation, int_const
from mrvl_convert.layers.qnn.requant import emit_with_requant

NCHW_FROM_NHWC = (0, 3, 1, 2)
NHWC_FROM_NCHW = (0, 2, 3, 1)


def lower(composite: Composite, ctx: LayoutContext, inexact: str = "") -> None:
    """The int8 chain as one Conv2DTranspose with the chain's scales (the rule checked the
    weight is int8 and the bias int32, both constants); ``inexact``: why its form is not exact
    (a bias scale the Nodes-JSON cannot state), or ""."""
    conv, in_dq = composite.binding.node("conv"), composite.binding.node("in_dq")
    weights = const_value(producer(conv.inputs[1]).inputs[0]).astype(np.int8)  # [I, O/g, ...]
    groups = int(attr(conv, "group", 1))
    if groups > 1:  # as the float kind: groups 1, block-diagonal over [I, O] (exact zeros)
        weights = block_diagonal(weights, groups)
    _, out_channels, kh, kw = weights.shape
    bias = present(conv, 2)
    bias = const_value(producer(bias).inputs[0]).astype(np.int32).reshape(-1) \
        if bias is not None else np.zeros(out_channels, np.int32)
    index, layout = ctx.require(in_dq.inputs[0], NHWC)
    activation, fused_consts = lut.fused(composite)
    attrs = {"strides": tuple(attr(conv, "strides", [1, 1])),
             "padding": tuple(attr(conv, "pads", [0, 0, 0, 0])),
             "dilation": tuple(attr(conv, "dilations", [1, 1])),
             "output_padding": tuple(attr(conv, "output_padding", [0, 0])), "groups": 1,
             "channels": out_channels, "kernel_size": (kh, kw), "activation_type": activation,
             "input_scale": scale_of(in_dq), "weight_scale": scale_of(producer(conv.inputs[1])),
             "output_scale": scale_of(composite.binding.node("out_q"))}
    consts = [("kernel", np.ascontiguousarray(weights.transpose(1, 2, 3, 0))),
              ("bias", bias.reshape(1, 1, 1, out_channels))] + fused_consts
    layer = new_layer(composite, "Conv2DTranspose", [index], [layout], spatial_out(composite),
                      attrs, consts)
    layer.inexact = inexact
    emit_with_requant(composite, ctx, layer)


class Conv2DTransposeInt8Kernel(Kernel):
    """int8 NHWC transposed convolution (OHWI int8 kernel, int32 bias): onnxruntime's
    ConvTranspose of the dequantized values, quantized to output_scale, then the fused
    activation. A block-diagonal kernel (a grouped one, written expanded) runs grouped again,
    as the QDQ model's ConvTranspose does."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, h, w, c = spec.input_rank(0, 4)
        kernel = int_const(spec, "kernel_const_name", consts, np.int8)
        if kernel.ndim != 4 or kernel.shape[3] != c or spec.value("groups") != 1:
            raise spec.error("attrs.kernel_const_name", f"kernel {list(kernel.shape)} is not "
                                                        f"OHWI over {c} input channels, groups 1")
        spec.value("kernel_layout")
        o, kh, kw, _ = kernel.shape
        bias = int_const(spec, "bias_const_name", consts, np.int32)
        if bias.size != o:
            raise spec.error("attrs.bias_const_name", f"bias has {bias.size} values, expected {o}")
        strides, dilation = spec.value("strides"), spec.value("dilation")
        pads, extra = spec.value("padding"), spec.value("output_padding")
        full = [(size - 1) * s + (k - 1) * d + 1 + e for size, s, k, d, e in
                zip((h, w), strides, (kh, kw), dilation, extra)]
        spec.expect_shape((n, full[0] - pads[0] - pads[2], full[1] - pads[1] - pads[3], o))
        s_in, s_w = spec.value("input_scale"), spec.value("weight_scale")
        attrs = {"kernel_shape": [kh, kw], "strides": list(strides), "pads": list(pads),
                 "dilations": list(dilation), "output_padding": list(extra), "group": 1}
        groups = diagonal_groups(kernel)
        blocks = diagonal_blocks(kernel, groups) if groups > 1 else [kernel]
        attrs["group"] = groups
        grouped = np.concatenate([b.transpose(3, 0, 1, 2) for b in blocks])   # [I, O/g, KH, KW]
        weights = [(np.ascontiguousarray(grouped), s_w),
                   (bias.reshape(o), float(np.float32(s_in) * np.float32(s_w)))]
        self.op = QdqOp("ConvTranspose", [((n, c, h, w), s_in)], spec.value("output_scale"),
                        attrs, weights)
        self.activation = FusedInt8Activation(spec, consts)

    def run(self, x: np.ndarray) -> np.ndarray:
        q = self.op(x.transpose(NCHW_FROM_NHWC))
        return self.activation(np.ascontiguousarray(q.transpose(NHWC_FROM_NCHW)))
