"""Conv2D and FC: the compute-heavy layers, each one float32 GEMM on fp16-valued operands."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .gemm import NUMPY_GEMM, GemmEngine
from .kernel_base import Kernel, first_string, fp16_const
from .layerspec import LayerSpec
from .ufuncs import RowAdd, relu_inplace
from .winograd import Winograd3x3
from .winograd import applies as winograd_applies


def pad_nhwc(x: np.ndarray, pads: Tuple[int, int, int, int], value: float = 0.0) -> np.ndarray:
    """Pad H and W of an NHWC array with ``value``; pads are [top, left, bottom, right]."""
    top, left, bottom, right = pads
    if not (top or left or bottom or right):
        return np.ascontiguousarray(x)
    n, h, w, c = x.shape
    out = np.full((n, h + top + bottom, w + left + right, c), value, dtype=x.dtype)
    out[:, top:top + h, left:left + w, :] = x
    return out


def window_view(xp: np.ndarray, out_hw: Tuple[int, int], kernel: Tuple[int, int],
                strides: Tuple[int, int], dilation: Tuple[int, int]) -> np.ndarray:
    """A read-only [N, OH, OW, KH, KW, C] view of the sliding windows of a padded NHWC array."""
    n, _, _, c = xp.shape
    s0, s1, s2, s3 = xp.strides
    shape = (n, out_hw[0], out_hw[1], kernel[0], kernel[1], c)
    strides_ = (s0, s1 * strides[0], s2 * strides[1], s1 * dilation[0], s2 * dilation[1], s3)
    return as_strided(xp, shape=shape, strides=strides_, writeable=False)


def conv_out_size(size: int, pad: int, kernel: int, stride: int, dilation: int) -> int:
    return (size + pad - dilation * (kernel - 1) - 1) // stride + 1


def read_bias(spec: LayerSpec, consts: Mapping[str, np.ndarray], o: int) -> np.ndarray:
    """The bias ([1,1,1,O] for Conv2D, [1,O] for FC) as a flat fp16-valued [O].

    Required, as FORMATS.md says: a Nodes-JSON that lost it must not run with other numbers.
    """
    bias = spec.const("bias_const_name", consts)
    if bias.size != o or max(bias.shape, default=1) != bias.size:
        raise spec.error("attrs.bias_const_name", f"bias has shape {list(bias.shape)}, "
                                                  f"expected {o} values along one axis")
    return fp16_const(spec, "bias_const_name", bias.reshape(o))


def weighted_capability_issue(attrs: Mapping[str, Any], kernel_layout: str) -> Optional[str]:
    """What get_capability says of a Conv2D / FC: the same requirements compile enforces."""
    if first_string(attrs, "kernel_layout", kernel_layout) != kernel_layout:
        return f"kernel_layout must be {kernel_layout}"
    if first_string(attrs, "activation_type", "").lower() not in ("", "none", "relu"):
        return "only relu can be fused"
    for key in ("kernel_const_name", "bias_const_name"):
        if key not in attrs:
            return f"no {key}"
    return None


class Conv2D(Kernel):
    """NHWC convolution with OHWI weights, zero padding, optional fused bias and relu."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, h, w, c = spec.input_rank(0, 4)
        self.strides = spec.ints("strides", 2, default=(1, 1))
        self.pads = spec.ints("padding", 4, default=(0, 0, 0, 0))
        self.dilation = spec.ints("dilation", 2, default=(1, 1))
        self.groups = spec.int1("groups", default=1)
        kernel = spec.const("kernel_const_name", consts)
        if kernel.ndim != 4:
            raise spec.error("attrs.kernel_const_name", f"kernel must be OHWI (4-D), got shape "
                                                        f"{list(kernel.shape)}")
        o, kh, kw, ig = kernel.shape
        self._check_geometry(c, o, kh, kw, ig)
        self.kernel_hw = (kh, kw)
        oh = conv_out_size(h, self.pads[0] + self.pads[2], kh, self.strides[0], self.dilation[0])
        ow = conv_out_size(w, self.pads[1] + self.pads[3], kw, self.strides[1], self.dilation[1])
        spec.expect_shape((n, oh, ow, o))
        self.out_hw = (oh, ow)
        self.out_channels = o
        self.add_bias = RowAdd(read_bias(spec, consts, o))
        self.relu = spec.relu()
        self._prepare_weights(self._fp16_const("kernel_const_name", kernel), c)

    def _check_geometry(self, c: int, o: int, kh: int, kw: int, ig: int) -> None:
        spec, g = self.spec, self.groups
        if g < 1 or c != ig * g or o % g:
            raise spec.error("attrs.groups", f"groups={g} does not fit input channels {c}, "
                                             f"kernel [O={o}, KH={kh}, KW={kw}, I/groups={ig}]")
        if min(self.strides) < 1 or min(self.dilation) < 1 or min(self.pads) < 0:
            raise spec.error("attrs.strides", "strides and dilation must be >= 1, padding >= 0")
        if "channels" in spec.attrs and spec.int1("channels") != o:
            raise spec.error("attrs.channels", f"is {spec.int1('channels')}, kernel has O={o}")
        if "kernel_size" in spec.attrs and spec.ints("kernel_size", 2) != (kh, kw):
            raise spec.error("attrs.kernel_size", f"is {list(spec.ints('kernel_size', 2))}, "
                                                  f"kernel has KH, KW = {kh}, {kw}")
        if spec.string("kernel_layout", "OHWI") != "OHWI":
            raise spec.error("attrs.kernel_layout", "only OHWI kernels are defined")

    def _prepare_weights(self, kernel: np.ndarray, c: int) -> None:
        """Re-lay the OHWI weights once into the form this conv's algorithm uses."""
        o, kh, kw, ig = kernel.shape
        g = self.groups
        self.pointwise = (kh == kw == 1 and not any(self.pads))
        if winograd_applies((kh, kw), self.strides, self.dilation, g, self.out_hw, c, o):
            self.mode = "winograd"
            self.winograd = Winograd3x3(kernel, self.pads, self.out_hw, self.gemm)
        elif g == 1:
            self.mode = "gemm"
            # [KH*KW*I, O]: matches the (kh, kw, c) order of an NHWC window flattened.
            self.product = self.gemm.bind(kernel.reshape(o, kh * kw * ig).T)
        elif ig == 1 and o == c:
            self.mode = "depthwise"
            self.taps = np.ascontiguousarray(kernel.reshape(o, kh, kw).transpose(1, 2, 0))
        else:
            self.mode = "grouped"
            og = o // g
            # [G, KH*KW*I/G, O/G]: one product per group, batched.
            self.product = self.gemm.bind(kernel.reshape(g, og, kh * kw * ig).transpose(0, 2, 1))

    def run(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[0]
        oh, ow = self.out_hw
        if self.mode == "winograd":
            y = self.winograd.run(x)
        elif self.mode == "depthwise":
            y = self._depthwise(x)
        elif self.mode == "grouped":
            y = self._grouped(x)
        else:
            y = self.product(self._columns(x))
        y = self.add_bias(y.reshape(n, oh, ow, self.out_channels))
        if self.relu:
            relu_inplace(y)
        return y

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

    def _grouped(self, x: np.ndarray) -> np.ndarray:
        n, c = x.shape[0], x.shape[3]
        g = self.groups
        xp = pad_nhwc(x, self.pads)
        view = window_view(xp, self.out_hw, self.kernel_hw, self.strides, self.dilation)
        m = n * self.out_hw[0] * self.out_hw[1]
        kh, kw = self.kernel_hw
        cols = view.reshape(m, kh, kw, g, c // g).transpose(3, 0, 1, 2, 4).reshape(g, m, -1)
        y = self.product(cols)                      # [G, M, O/G]
        return y.transpose(1, 0, 2).reshape(m, -1)  # group-major channel order, as ONNX

    def _depthwise(self, x: np.ndarray) -> np.ndarray:
        """One multiply-add per kernel tap over the whole tensor: no pixel loop, no im2col."""
        xp = pad_nhwc(x, self.pads)
        (oh, ow), (sh, sw), (dh, dw) = self.out_hw, self.strides, self.dilation
        acc = np.zeros((x.shape[0], oh, ow, x.shape[3]), dtype=np.float32)
        tmp = np.empty_like(acc)
        for i in range(self.kernel_hw[0]):
            for j in range(self.kernel_hw[1]):
                tap = xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                         j * dw:j * dw + (ow - 1) * sw + 1:sw, :]
                np.multiply(tap, self.taps[i, j], out=tmp)
                acc += tmp
        return acc

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        return weighted_capability_issue(attrs, "OHWI")


class FC(Kernel):
    """Fully connected: out = in @ W.T + b with W in OI layout, optional relu."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, i = spec.input_rank(0, 2)
        weight = spec.const("kernel_const_name", consts)
        if weight.ndim != 2 or weight.shape[1] != i:
            raise spec.error("attrs.kernel_const_name", f"kernel has shape {list(weight.shape)}"
                                                        f", expected [O, {i}] (OI)")
        if spec.string("kernel_layout", "OI") != "OI":
            raise spec.error("attrs.kernel_layout", "only OI kernels are defined")
        o = weight.shape[0]
        spec.expect_shape((n, o))
        # Pre-transposed to [I, O] so run() is one product.
        self.product = self.gemm.bind(self._fp16_const("kernel_const_name", weight).T)
        self.add_bias = RowAdd(read_bias(spec, consts, o))
        self.relu = spec.relu()

    def run(self, x: np.ndarray) -> np.ndarray:
        y = self.add_bias(self.product(x))
        if self.relu:
            relu_inplace(y)
        return y

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        return weighted_capability_issue(attrs, "OI")
