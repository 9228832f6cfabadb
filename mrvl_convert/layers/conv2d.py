"""Conv2D: NHWC convolution with OHWI weights, bias, and an optional fused activation.

Matched from ``[Pad] Conv [Add bias] [BatchNormalization] [activation]``; the Pad, bias and
BatchNormalization are folded into the layer's padding, kernel and bias when it is lowered.
The contract is upstream TVM v0.19's ``mrvl.conv2d_nhwc2nhwc`` (``src/relay/backend/contrib/mrvl/
codegen.cc``), as tests/system/test_golden_upstream.py checks against upstream's own output.

One home for the kind: its declaration (``KIND``), its lowering (``lower``: ONNX composite ->
Conv2D layer) and its kernel (``Conv2DKernel``: the simulator's numpy and ONNX forms). The
weight forms it shares with other convolutions (block-diagonal grouped weights, channel copies)
are ``kernels/conv_weights.py``.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import attr, const_value, conv_pads, is_const, pad_amounts, present, static_shape
from mrvl_convert.ir.layout import NHWC, LayoutContext
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine, Product
from mrvl_convert.kernels.base import Kernel, LazyWeights, read_bias
from mrvl_convert.kernels.conv_weights import (block_diagonal, channel_copies, diagonal_blocks,
                                               diagonal_groups)
from mrvl_convert.kernels.fp16 import fp16_const
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.ufuncs import RowAdd, activate_inplace
from mrvl_convert.kernels.winograd import Winograd3x3
from mrvl_convert.kernels.winograd import applies as winograd_applies
from mrvl_convert.kernels.windows import conv_out_size, pad_nhwc, reads_every_pixel, taps, window_view
from mrvl_convert.layers._kind import FUSED_ACTIVATION, Attr, Const, LayerKind, ints, roles, written
from mrvl_convert.layers._conv_fold import bn_affine, per_channel, scaled, tail_affine
from mrvl_convert.layers._lowering import activation, new_layer, spatial_out


def lower(composite: Composite, ctx: LayoutContext) -> None:
    """A composite is a convolution (role ``conv``), a per-channel affine (role ``scale``: a
    standalone BatchNormalization or Mul by a per-channel constant, as a depthwise 1x1 layer), or
    a channel shuffle (role ``shuffle``: a permutation of the channels, as a 1x1 layer)."""
    binding = composite.binding
    if binding.node("conv") is not None:
        _lower_conv(composite, ctx)
    elif binding.node("scale") is not None:
        _lower_affine(composite, ctx)
    else:
        _lower_shuffle(composite, ctx)


def _emit(composite: Composite, ctx: LayoutContext, source, weights: np.ndarray,
          bias: np.ndarray, geometry: dict) -> None:
    """One Conv2D layer from OIHW float32 weights and a [O] bias."""
    index, layout = ctx.require(source, NHWC)
    out_channels, _, kh, kw = weights.shape
    attrs = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
             **geometry, "channels": out_channels, "kernel_size": (kh, kw),
             "activation_type": activation(composite)}
    # Always a copy: ``weights`` may be the model's own constant (a 1x1 kernel transposes to a
    # contiguous view of it).
    consts = [("kernel", np.array(weights.transpose(0, 2, 3, 1), np.float32, order="C")),
              ("bias", bias.astype(np.float32).reshape(1, 1, 1, out_channels))]
    ctx.emit(new_layer(composite, "Conv2D", [index], [layout], spatial_out(composite), attrs,
                       consts), composite.output)


def _lower_conv(composite: Composite, ctx: LayoutContext) -> None:
    conv = composite.binding.node("conv")
    pad = composite.binding.node("pad")
    source = pad.inputs[0] if pad is not None else conv.inputs[0]
    weights = const_value(conv.inputs[1]).astype(np.float32, copy=False)
    out_channels, _, kh, kw = weights.shape
    bias = present(conv, 2)
    bias = const_value(bias).astype(np.float32).reshape(-1) if bias is not None else \
        np.zeros(out_channels, np.float32)
    strides = attr(conv, "strides", [1, 1])
    dilations = attr(conv, "dilations", [1, 1])
    conv_in = static_shape(conv.inputs[0])
    pads = conv_pads(conv, conv_in, [kh, kw], strides, dilations, static_shape(conv.outputs[0]))
    if pad is not None:
        extra = pad_amounts(pad)
        pads = [pads[0] + extra[2], pads[1] + extra[3], pads[2] + extra[6], pads[3] + extra[7]]
    add = composite.binding.node("bias")
    if add is not None:
        const = [t for t in add.inputs if is_const(t)][0]
        bias = bias + np.broadcast_to(const_value(const).astype(np.float32).reshape(-1),
                                      (out_channels,))
    bn = composite.binding.node("bn")
    if bn is not None:
        scale, shift = bn_affine(bn)
        weights = scaled(weights, scale)
        bias = ((bias - const_value(bn.inputs[3]).astype(np.float64)) * scale
                + const_value(bn.inputs[2]).astype(np.float64)).astype(np.float32)
    if composite.binding.node("scale") is not None or composite.binding.node("shift") is not None:
        scale, shift = tail_affine(composite, out_channels)
        weights = scaled(weights, scale)
        bias = (bias * scale + shift).astype(np.float32)
    groups = int(attr(conv, "group", 1))
    in_channels = conv_in[1]
    if 1 < groups < in_channels:
        # The accelerator's Conv2D is ordinary or depthwise: a grouped conv becomes one
        # ordinary conv whose weight is block-diagonal (exact: the added taps are zeros).
        weights, groups = block_diagonal(weights, groups), 1
    _emit(composite, ctx, source, weights, bias,
          {"strides": tuple(strides), "padding": tuple(pads), "dilation": tuple(dilations),
           "groups": groups})


def _lower_affine(composite: Composite, ctx: LayoutContext) -> None:
    """x * scale + shift per channel as a depthwise 1x1 Conv2D (weights = scale, bias = shift)."""
    anchor = composite.binding.node("scale")
    channels = static_shape(anchor.outputs[0])[1]
    if anchor.op == "BatchNormalization":
        scale, shift = bn_affine(anchor)
        add = composite.binding.node("shift")
        if add is not None:
            shift = shift + per_channel([t for t in add.inputs if is_const(t)][0], channels)
    else:
        scale, shift = tail_affine(composite, channels)
    source = next(t for t in anchor.inputs if not is_const(t))
    _emit(composite, ctx, source, scale.astype(np.float32).reshape(channels, 1, 1, 1),
          shift.astype(np.float32), {"groups": channels})


def _lower_shuffle(composite: Composite, ctx: LayoutContext) -> None:
    """A channel shuffle (Reshape -> Transpose -> Reshape) as a 1x1 Conv2D whose weight is the
    permutation matrix: every output is 1.0 times one input channel, exact in fp16."""
    first = composite.binding.node("shuffle")
    channels = static_shape(first.inputs[0])[1]
    order = channel_shuffle_order(composite)
    weights = np.zeros((channels, channels, 1, 1), np.float32)
    weights[np.arange(channels), order, 0, 0] = 1.0
    _emit(composite, ctx, first.inputs[0], weights, np.zeros(channels, np.float32), {})


def channel_shuffle_order(composite: Composite) -> np.ndarray:
    """Which input channel each output channel of a Reshape -> Transpose -> Reshape takes."""
    first, transpose = composite.binding.node("shuffle"), composite.binding.node("transpose")
    n, c, h, w = static_shape(first.inputs[0])
    index = np.arange(c).reshape(static_shape(first.outputs[0])[1:-2])
    perm = [p - 1 for p in attr(transpose, "perm")[1:-2]]
    return np.ascontiguousarray(index.transpose(perm)).reshape(c)


class Conv2DKernel(Kernel):
    """NHWC convolution with OHWI weights, zero padding, bias, optional fused activation."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        c = self._read_geometry()
        kernel = spec.const("kernel_const_name", consts)
        o = self._take_kernel(kernel, c)
        self.add_bias = RowAdd(read_bias(spec, consts, o))
        self.activation = spec.value("activation_type")
        rounded = fp16_const(spec, "kernel_const_name", kernel)  # its range error: now
        self._choose_mode(kernel.shape, c)
        # A channel shuffle (or any 1x1 layer copying one input channel per output) moves
        # values: computed as a gather, with nothing to round (``exact``).
        self.copies = None
        if self.pointwise and self.strides == (1, 1) and self.activation is None \
                and not self.add_bias.row.any():
            self.copies = channel_copies(rounded)
        self.exact = self.copies is not None
        if self.copies is None:
            # Only the raw array: the rounded one is remade from it on the first run, if any.
            self.weights = LazyWeights(lambda: fp16_const(spec, "kernel_const_name", kernel),
                                       self._prepare)

    def _read_geometry(self) -> int:
        """Strides, pads, dilation and groups from the layer; returns the input channels."""
        spec = self.spec
        self.strides = spec.value("strides")
        self.pads = spec.value("padding")
        self.dilation = spec.value("dilation")
        self.groups = spec.value("groups")
        return spec.input_rank(0, 4)[3]

    def _take_kernel(self, kernel: np.ndarray, c: int) -> int:
        """Check an OHWI kernel against the input and the stated output; returns O."""
        spec = self.spec
        n, h, w, _ = spec.input_shapes[0]
        if kernel.ndim != 4:
            raise spec.error("attrs.kernel_const_name", f"kernel must be OHWI (4-D), got shape "
                                                        f"{list(kernel.shape)}")
        o, kh, kw, ig = kernel.shape
        self._check_geometry(c, o, kh, kw, ig)
        self.kernel_hw = (kh, kw)
        oh = conv_out_size(h, self.pads[0] + self.pads[2], kh, self.strides[0], self.dilation[0])
        ow = conv_out_size(w, self.pads[1] + self.pads[3], kw, self.strides[1], self.dilation[1])
        spec.expect_shape((n, oh, ow, o))
        self.out_hw, self.out_channels = (oh, ow), o
        return o

    def _check_geometry(self, c: int, o: int, kh: int, kw: int, ig: int) -> None:
        spec, g = self.spec, self.groups
        if g < 1 or c != ig * g or o % g:
            raise spec.error("attrs.groups", f"groups={g} does not fit input channels {c}, "
                                             f"kernel [O={o}, KH={kh}, KW={kw}, I/groups={ig}]")
        if min(self.strides) < 1 or min(self.dilation) < 1 or min(self.pads) < 0:
            raise spec.error("attrs.strides", "strides and dilation must be >= 1, padding >= 0")
        if "channels" in spec.attrs and spec.value("channels") != o:
            raise spec.error("attrs.channels", f"is {spec.value('channels')}, kernel has O={o}")
        if "kernel_size" in spec.attrs and spec.value("kernel_size") != (kh, kw):
            raise spec.error("attrs.kernel_size", f"is {list(spec.value('kernel_size'))}, "
                                                  f"kernel has KH, KW = {kh}, {kw}")
        spec.value("kernel_layout")

    def _choose_mode(self, ohwi: Sequence[int], c: int) -> None:
        """The algorithm ``run`` uses, from the shapes alone."""
        o, kh, kw, ig = ohwi
        g = self.groups
        self.pointwise = (kh == kw == 1 and not any(self.pads))
        if winograd_applies((kh, kw), self.strides, self.dilation, g, self.out_hw, c, o):
            self.mode = "winograd"
        elif g == 1:
            self.mode = "gemm"
        elif ig == 1 and o == c:
            self.mode = "depthwise"
        else:
            self.mode = "grouped"

    def _prepare(self, kernel: np.ndarray) -> Any:
        """The fp16-rounded OHWI weights re-laid into the form this conv's algorithm uses."""
        o, kh, kw, ig = kernel.shape
        g = self.groups
        if self.mode == "winograd":
            return Winograd3x3(kernel, self.pads, self.out_hw, self.gemm)
        if self.mode == "gemm":
            # [KH*KW*I, O]: matches the (kh, kw, c) order of an NHWC window flattened.
            return self.gemm.bind(kernel.reshape(o, kh * kw * ig).T)
        if self.mode == "depthwise":
            return np.ascontiguousarray(kernel.reshape(o, kh, kw).transpose(1, 2, 0))
        # [G, KH*KW*I/G, O/G]: one product per group, batched.
        return self.gemm.bind(kernel.reshape(g, o // g, kh * kw * ig).transpose(0, 2, 1))

    # The prepared form under the names it had when it was made at compile time.
    @property
    def winograd(self) -> Winograd3x3:
        return self._prepared_as("winograd")

    @property
    def product(self) -> Product:
        return self._prepared_as("gemm", "grouped")

    @property
    def taps(self) -> np.ndarray:
        return self._prepared_as("depthwise")

    def _prepared_as(self, *modes: str) -> Any:
        if self.mode not in modes or self.weights is None:
            raise AttributeError(f"a {self.mode} Conv2D has no {' or '.join(modes)} weights")
        return self.weights.get()

    def run(self, x: np.ndarray) -> np.ndarray:
        if self.copies is not None:  # 1.0 * x plus zeros is x: the same values, no products
            return np.take(x, self.copies, axis=3)
        n = x.shape[0]
        oh, ow = self.out_hw
        prepared = self.weights.get()
        if self.mode == "winograd":
            y = prepared.run(x)
        elif self.mode == "depthwise":
            y = self._depthwise(x, prepared)
        elif self.mode == "grouped":
            y = self._grouped(x, prepared)
        else:
            y = prepared(self._columns(x))
        y = self.add_bias(y.reshape(n, oh, ow, self.out_channels))
        return activate_inplace(y, self.activation)

    def _columns(self, x: np.ndarray) -> np.ndarray:
        """im2col: the [N*OH*OW, KH*KW*C] patch matrix (a plain reshape for 1x1 convs)."""
        n, c = x.shape[0], x.shape[3]
        sh, sw = self.strides
        if self.pointwise:
            if sh != 1 or sw != 1:
                x = x[:, ::sh, ::sw, :]
            return np.ascontiguousarray(x).reshape(-1, c)
        xp = pad_nhwc(x, self.pads)
        view = window_view(xp, self.out_hw, self.kernel_hw, self.strides, self.dilation)
        return view.reshape(n * self.out_hw[0] * self.out_hw[1], -1)

    def _grouped(self, x: np.ndarray, product: Product) -> np.ndarray:
        n, c = x.shape[0], x.shape[3]
        g = self.groups
        xp = pad_nhwc(x, self.pads)
        view = window_view(xp, self.out_hw, self.kernel_hw, self.strides, self.dilation)
        m = n * self.out_hw[0] * self.out_hw[1]
        kh, kw = self.kernel_hw
        cols = view.reshape(m, kh, kw, g, c // g).transpose(3, 0, 1, 2, 4).reshape(g, m, -1)
        y = product(cols)                           # [G, M, O/G]
        return y.transpose(1, 0, 2).reshape(m, -1)  # group-major channel order, as ONNX

    def _depthwise(self, x: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """One multiply-add per kernel tap over the whole tensor: no pixel loop, no im2col."""
        xp = pad_nhwc(x, self.pads)
        oh, ow = self.out_hw
        acc = np.zeros((x.shape[0], oh, ow, x.shape[3]), dtype=np.float32)
        tmp = np.empty_like(acc)
        for i, j, view in taps(xp, self.out_hw, self.kernel_hw, self.strides, self.dilation):
            np.multiply(view, weights[i, j], out=tmp)
            acc += tmp
        return acc

    def passes_nonfinite(self, index: int) -> bool:
        """With no fused activation (which can map -inf to a finite value), when the windows
        read every input position: a product with inf or NaN is inf or NaN (inf * 0 is NaN),
        and so is every sum holding one."""
        if self.copies is not None:  # a gather: only the channels it copies
            return np.unique(self.copies).size == self.spec.input_shapes[0][3]
        return self.activation is None and reads_every_pixel(
            self.spec.input_shapes[0][1:3], self.pads, self.kernel_hw, self.strides,
            self.dilation, self.out_hw)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Conv (NCHW, OIHW weights, any groups) with the fused activation; the numpy
        modes (im2col, Winograd, depthwise, grouped) all compute this convolution."""
        spec = self.spec
        if self.copies is not None:
            # On the NCHW channel axis: whole planes per index, where NHWC copies single values
            # (and the transposes cancel against the convolutions around it).
            copied = builder.op("Gather", [builder.to_nchw(inputs[0]),
                                           builder.constant(self.copies)], axis=1)
            return [builder.to_nhwc(copied)]
        bias = builder.float_constant(read_bias(spec, builder.consts, self.out_channels))
        if self.mode == "depthwise" and self.pointwise and self.strides == (1, 1):
            # A per-channel affine (a folded BatchNormalization): x * w + b as this kernel
            # computes it, in NHWC; onnxruntime's grouped Conv would run O one-channel products.
            scale = builder.fp16_weight(spec, "kernel_const_name", perm=(1, 2, 3, 0))
            y = builder.op("Add", [builder.op("Mul", [inputs[0], scale]), bias])
            return [builder.activation(y, self.activation)]
        kernel = fp16_const(spec, "kernel_const_name", spec.const("kernel_const_name",
                                                                  builder.consts))
        # A grouped convolution written with groups=1 (zero outside its diagonal blocks, as
        # grouped Conv is lowered): the same sums without the zero products.
        groups = self.groups if self.groups > 1 else diagonal_groups(kernel)
        if groups != self.groups:
            kernel = np.concatenate([block for block in diagonal_blocks(kernel, groups)])
        oihw = np.ascontiguousarray(kernel.transpose(0, 3, 1, 2))
        weight = builder.constant(oihw, "w")
        if self.weights is not None:
            # The first run's weights from the segment's own (contiguous OHWI again, as when
            # read from the constants; block-diagonal again if written so): the raw constant
            # need not outlive compile.
            read = builder.reader(weight)
            self.weights.share(lambda: np.ascontiguousarray(
                (read() if groups == self.groups else block_diagonal(read(), groups))
                .transpose(0, 2, 3, 1)))
        y = builder.op("Conv", [builder.to_nchw(inputs[0]), weight, bias],
                       kernel_shape=list(self.kernel_hw), strides=list(self.strides),
                       pads=list(self.pads), dilations=list(self.dilation), group=groups)
        return [builder.to_nhwc(builder.activation(y, self.activation))]


KIND = LayerKind(
    name="Conv2D",
    summary="NHWC convolution, zero padding; BatchNormalization already folded into kernel and "
            "bias. Depthwise is `groups` == input channels.",
    kernel=Conv2DKernel,
    lower=lower,
    one_of_roles=roles("conv", "scale", "shuffle"),
    optional_roles=roles("pad", "conv", "bias", "bn", "scale", "shift", "act", "shuffle",
                         "transpose", "merge", "split_q", "split_dq", "moved_q", "moved_dq"),
    attrs=(
        ints("strides", "[sh, sw]", 2, default=(1, 1)),
        ints("padding", "[top, left, bottom, right]", 4, default=(0, 0, 0, 0)),
        ints("dilation", "[dh, dw]", 2, default=(1, 1)),
        Attr("groups", "int", "1, or the input channels (depthwise)", default=1),
        Attr("channels", "int", "output channels O (= the kernel's O)"),
        ints("kernel_size", "[kh, kw] (= the kernel's KH, KW)", 2),
        written("kernel_layout", "OHWI", "the kernel constant's layout", checked=True),
        written("bias_layout", "---O", "the bias constant's layout"),
        written("out_dtype", "", "as upstream writes it"),
        FUSED_ACTIVATION,
    ),
    consts=(Const("kernel", "kernel", "OHWI `[O, KH, KW, I/groups]`"),
            Const("bias", "bias", "`[1, 1, 1, O]`; zeros when the model has no bias")),
    compute_heavy=True,
    quantizable=True,
    source="apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc",
)
