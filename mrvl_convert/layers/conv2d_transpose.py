"""Conv2DTranspose: NHWC transposed convolution (groups 1) with OHWI weights, bias, optional
fused Relu.

Matched from ONNX ``ConvTranspose [Add bias] [Relu]`` with explicit pads. A grouped one
(``group`` g > 1, weight ``[I, O/g, KH, KW]``) is written as groups 1 with a block-diagonal
kernel: group k's input channels feed only its O/g output channels, the other weights are 0, so
the result is exact (each output adds only zero products beyond the grouped ones) at g times
the MACs. Not as the codegen does: for ``channels == groups`` it names the layer ``Conv2D`` (a
forward convolution, another function), and otherwise writes Relay's ``[O/g, KH, KW, I]``
kernel with ``groups`` g, a form no public source says the backend reads; groups 1 is the form
it does read. The expanded kernel is bounded (rules/checks_shape.py).

The contract is the
newer Marvell codegen's ``mrvl.conv2d_transpose``: princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateCompositeMrvlConv2DTransposeLayer`` (Relay's ``Conv2DTransposeAttrs`` as
``SetCallNodeAttribute`` writes them, kernel layout OHWI after ConvertLayout, bias ``---O``,
``activation_type`` relu).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from mrvl_convert.core.graph import attr, const_value, is_const, present
from mrvl_convert.ir.layout import NHWC, LayoutContext
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel, LazyWeights, read_bias
from mrvl_convert.kernels.conv_weights import block_diagonal
from mrvl_convert.kernels.fp16 import fp16_const
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.ufuncs import activate_inplace
from mrvl_convert.layers._kind import FUSED_ACTIVATION, MARVELL, Attr, Const, LayerKind, ints, roles, written
from mrvl_convert.layers._lowering import activation, new_layer, spatial_out


def lower(composite: Composite, ctx: LayoutContext) -> None:
    conv = composite.binding.node("conv")
    index, layout = ctx.require(conv.inputs[0], NHWC)
    weights = const_value(conv.inputs[1]).astype(np.float32)      # [I, O/g, KH, KW]
    groups = int(attr(conv, "group", 1))
    if groups > 1:  # a grouped Conv's expansion, on the [I, O/g] axes: -> [I, O, KH, KW]
        weights = block_diagonal(weights, groups)
    _, out_channels, kh, kw = weights.shape
    bias = present(conv, 2)
    bias = const_value(bias).astype(np.float32).reshape(-1) if bias is not None else \
        np.zeros(out_channels, np.float32)
    add = composite.binding.node("bias")
    if add is not None:
        const = [t for t in add.inputs if is_const(t)][0]
        bias = bias + np.broadcast_to(const_value(const).astype(np.float32).reshape(-1),
                                      (out_channels,))
    attrs = {"strides": tuple(attr(conv, "strides", [1, 1])),
             "padding": tuple(attr(conv, "pads", [0, 0, 0, 0])),
             "dilation": tuple(attr(conv, "dilations", [1, 1])),
             "output_padding": tuple(attr(conv, "output_padding", [0, 0])), "groups": 1,
             "channels": out_channels, "kernel_size": (kh, kw),
             "activation_type": activation(composite)}
    consts = [("kernel", np.ascontiguousarray(weights.transpose(1, 2, 3, 0))),
              ("bias", bias.astype(np.float32).reshape(1, 1, 1, out_channels))]
    ctx.emit(new_layer(composite, "Conv2DTranspose", [index], [layout], spatial_out(composite),
                       attrs, consts), composite.output)


class Conv2DTransposeKernel(Kernel):
    """Every input pixel scatters x[n, h, w, :] @ W[:, i, j, :].T to output pixel
    (h * sh + i * dh - top, w * sw + j * dw - left); one float32 matrix product for all taps."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, h, w, c = spec.input_rank(0, 4)
        kernel = spec.const("kernel_const_name", consts)
        if kernel.ndim != 4 or kernel.shape[3] != c or spec.value("groups") != 1:
            raise spec.error("attrs.kernel_const_name", f"kernel {list(kernel.shape)} is not "
                                                        f"OHWI over {c} input channels, groups 1")
        o, kh, kw, _ = kernel.shape
        self.strides, self.dilation = spec.value("strides"), spec.value("dilation")
        self.pads, extra = spec.value("padding"), spec.value("output_padding")
        self.taps = (kh, kw)
        self.full = tuple((size - 1) * s + (k - 1) * d + 1 + e for size, s, k, d, e in
                          zip((h, w), self.strides, (kh, kw), self.dilation, extra))
        spec.expect_shape((n, self.full[0] - self.pads[0] - self.pads[2],
                           self.full[1] - self.pads[1] - self.pads[3], o))
        fp16_const(spec, "kernel_const_name", kernel)  # its range error: now
        self.weights = LazyWeights(
            lambda: fp16_const(spec, "kernel_const_name", kernel),
            lambda rounded: np.ascontiguousarray(rounded.transpose(3, 1, 2, 0).reshape(c, -1)))
        self.bias = read_bias(spec, consts, o)
        self.activation = spec.value("activation_type")

    def run(self, x: np.ndarray) -> np.ndarray:
        n, h, w, c = x.shape
        (kh, kw), (sh, sw), (dh, dw) = self.taps, self.strides, self.dilation
        cols = (x.reshape(-1, c) @ self.weights.get()).reshape(n, h, w, kh, kw, -1)
        full = np.zeros((n, *self.full, cols.shape[-1]), np.float32)
        for i in range(kh):
            for j in range(kw):
                full[:, i * dh:i * dh + (h - 1) * sh + 1:sh,
                     j * dw:j * dw + (w - 1) * sw + 1:sw] += cols[:, :, :, i, j]
        top, left, bottom, right = self.pads
        out = full[:, top:self.full[0] - bottom, left:self.full[1] - right] + self.bias
        return activate_inplace(np.ascontiguousarray(out), self.activation)


KIND = LayerKind(
    name="Conv2DTranspose",
    summary="NHWC transposed convolution, groups 1: output size (in - 1) * stride + "
            "(kernel - 1) * dilation + 1 + output_padding - padding",
    kernel=Conv2DTransposeKernel,
    lower=lower,
    required_roles=roles("conv"),
    optional_roles=roles("bias", "act"),
    attrs=(
        ints("strides", "[sh, sw]", 2, default=(1, 1)),
        ints("padding", "[top, left, bottom, right], cropped from the full output", 4,
             default=(0, 0, 0, 0)),
        ints("dilation", "[dh, dw]", 2, default=(1, 1)),
        ints("output_padding", "[bottom, right] rows and columns added", 2, default=(0, 0)),
        Attr("groups", "int", "1", default=1),
        Attr("channels", "int", "output channels O (= the kernel's O)"),
        ints("kernel_size", "[kh, kw] (= the kernel's KH, KW)", 2),
        written("kernel_layout", "OHWI", "the kernel constant's layout", checked=True),
        written("bias_layout", "---O", "the bias constant's layout"),
        written("out_dtype", "", "as the codegen writes it"),
        FUSED_ACTIVATION,
    ),
    consts=(Const("kernel", "kernel", "OHWI `[O, KH, KW, I]`"),
            Const("bias", "bias", "`[1, 1, 1, O]`; zeros when the model has no bias")),
    compute_heavy=True,
    layer_sets=frozenset({MARVELL}),
    source="princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc CreateCompositeMrvlConv2DTransposeLayer",
)
