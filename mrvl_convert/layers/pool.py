"""Pooling layers (NHWC): Maxpool2D, Avgpool2D and their global forms.

Windows are handled one kernel tap at a time over the whole tensor (KH*KW vectorised numpy
operations), never with a loop over pixels. The contract is upstream TVM v0.19's
``mrvl.maxpool2d_nhwc2nhwc``, ``mrvl.avgpool2d_nhwc2nhwc``, ``mrvl.globalavgpool2d_nhwc2nhwc`` and
``mrvl.globalmaxpool2d_nhwc2nhwc`` (``src/relay/backend/contrib/mrvl/codegen.cc``).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import attr, conv_pads, static_shape
from mrvl_convert.core.pooling import pool_out_size
from mrvl_convert.ir.layout import NHWC, LayoutContext
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.windows import pad_nhwc, reads_every_pixel, tap, taps
from mrvl_convert.layers._kind import Attr, LayerKind, ints, roles, written
from mrvl_convert.layers._lowering import new_layer, spatial_out
from mrvl_convert.layers._max_pairs import lower_max_pair

_LAYOUT = written("layout", "NHWC", "as upstream writes it")


def _lower(kind: str) -> Callable[[Composite, LayoutContext], None]:
    def lower(composite: Composite, ctx: LayoutContext) -> None:
        if composite.binding.node("pair") is not None:  # Max/Min of activations (mrvl.max_pair)
            lower_max_pair(composite, ctx)
            return
        pool = composite.binding.node("pool")
        index, layout = ctx.require(pool.inputs[0], NHWC)
        attrs: Dict[str, Any] = {}
        if kind in ("Maxpool2D", "Avgpool2D"):
            kernel = tuple(attr(pool, "kernel_shape"))
            strides = attr(pool, "strides", [1, 1])
            dilations = attr(pool, "dilations", [1, 1])
            pads = conv_pads(pool, static_shape(pool.inputs[0]), kernel, strides, dilations,
                             static_shape(pool.outputs[0]))
            attrs.update({"pool_size": kernel, "kernel_layout_shape": kernel,
                          "strides": tuple(strides), "padding": tuple(pads),
                          "dilation": tuple(dilations), "ceil_mode": attr(pool, "ceil_mode", 0)})
            if kind == "Avgpool2D":
                attrs["count_include_pad"] = attr(pool, "count_include_pad", 0)
        ctx.emit(new_layer(composite, kind, [index], [layout], spatial_out(composite), attrs),
                 composite.output)
    return lower


class _Pool2D(Kernel):
    """Shared geometry: pool_size, strides, padding [t, l, b, r], dilation, ceil_mode."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, h, w, c = spec.input_rank(0, 4)
        # The format states the window twice; two different windows is a broken artifact.
        stated = {key: spec.value(key) for key in ("pool_size", "kernel_layout_shape")
                  if key in spec.attrs}
        if len(set(stated.values())) > 1:
            layout, size = stated["kernel_layout_shape"], stated["pool_size"]
            raise spec.error("attrs.kernel_layout_shape",
                             f"is {list(layout)} but pool_size is {list(size)}")
        self.kernel_hw = stated.get("pool_size") or spec.value("kernel_layout_shape")
        self.strides = spec.value("strides")
        pads = spec.value("padding")
        self.dilation = spec.value("dilation")
        ceil_mode = spec.value("ceil_mode")
        if min(self.kernel_hw + self.strides + self.dilation) < 1 or min(pads) < 0:
            raise spec.error("attrs.pool_size", "pool size, strides and dilation must be >= 1, "
                                                "padding >= 0")
        oh = self._out(h, pads[0], pads[2], 0, ceil_mode)
        ow = self._out(w, pads[1], pads[3], 1, ceil_mode)
        spec.expect_shape((n, oh, ow, c))
        self.out_hw = (oh, ow)
        self.input_hw = (h, w)
        # Ceil mode can make the last window run past the explicit padding: extend the padded
        # input at the bottom/right so every window is in bounds (that extension never counts).
        extra_h = max(0, self._extent(oh, 0) - (h + pads[0] + pads[2]))
        extra_w = max(0, self._extent(ow, 1) - (w + pads[1] + pads[3]))
        self.explicit_pads = pads
        self.pads = (pads[0], pads[1], pads[2] + extra_h, pads[3] + extra_w)

    def _out(self, size: int, head: int, tail: int, axis: int, ceil_mode: bool) -> int:
        return pool_out_size(size, head, tail, self.kernel_hw[axis], self.strides[axis],
                             self.dilation[axis], ceil_mode)

    def _extent(self, out: int, axis: int) -> int:
        return (out - 1) * self.strides[axis] + self.dilation[axis] * (self.kernel_hw[axis] - 1) + 1

    def _valid_taps(self, include_pad: bool) -> np.ndarray:
        """Per output pixel, how many window taps fall on counted positions (the input, plus
        the explicit pads when ``include_pad``; never the ceil-mode extension): [1, OH, OW, 1]."""
        (h, w), (top, left, bottom, right) = self.input_hw, self.explicit_pads
        mask = np.zeros((1, h + self.pads[0] + self.pads[2], w + self.pads[1] + self.pads[3], 1),
                        dtype=np.float32)
        if include_pad:
            mask[:, :top + h + bottom, :left + w + right, :] = 1.0
        else:
            mask[:, top:top + h, left:left + w, :] = 1.0
        count = np.zeros((1,) + self.out_hw + (1,), dtype=np.float32)
        for _, _, view in self._taps(mask):
            count += view
        return count

    def _taps(self, xp: np.ndarray):
        return taps(xp, self.out_hw, self.kernel_hw, self.strides, self.dilation)

    def _ceil_extends(self) -> bool:
        """Whether ceil mode gives another output size than floor mode: onnxruntime before 1.21
        sizes and fills such windows by an older rule, so no ONNX form is given for them."""
        (h, w), pads = self.input_hw, self.explicit_pads
        floor = (self._out(h, pads[0], pads[2], 0, False), self._out(w, pads[1], pads[3], 1, False))
        return tuple(self.pads) != tuple(pads) or floor != tuple(self.out_hw)

    def _onnx_window(self) -> Dict[str, Any]:
        """The window as ONNX MaxPool / AveragePool attributes, in floor mode: a form is given
        only where ceil mode changes nothing (``_ceil_extends``)."""
        return {"kernel_shape": list(self.kernel_hw), "strides": list(self.strides),
                "pads": list(self.explicit_pads), "ceil_mode": 0,
                **({"dilations": list(self.dilation)} if self.dilation != (1, 1) else {})}

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        if "pool_size" not in attrs and "kernel_layout_shape" not in attrs:
            return "no pool_size"
        return None


class Maxpool2DKernel(_Pool2D):
    """Max over each window; padding is -inf so it never wins.

    The output is a selection of input values, so it is already on the fp16 grid (``exact``)
    unless some window holds padding only (then -inf, which the simulator's range check reports).
    """

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.exact = bool((self._valid_taps(include_pad=False) > 0).all())

    def run(self, x: np.ndarray) -> np.ndarray:
        xp = pad_nhwc(x, self.pads, -np.inf)
        (oh, ow), (sh, sw), (dh, dw) = self.out_hw, self.strides, self.dilation
        # Separable, rows first: an H tap is a slice of whole padded rows (long contiguous runs,
        # numpy's fast case), and the W taps then run on the H-reduced array: KH + KW passes
        # instead of KH * KW. Max is exact in any order.
        rows = np.array(xp[:, tap(0, oh, sh)], dtype=np.float32)
        for i in range(1, self.kernel_hw[0]):
            np.maximum(rows, xp[:, tap(i * dh, oh, sh)], out=rows)
        out = np.array(rows[:, :, tap(0, ow, sw)])
        for j in range(1, self.kernel_hw[1]):
            np.maximum(out, rows[:, :, tap(j * dw, ow, sw)], out=out)
        return out

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX MaxPool (NCHW); none where a window holds padding only (-inf here, not there)."""
        if not self.exact or self._ceil_extends():
            return None
        return [builder.to_nhwc(builder.op("MaxPool", [builder.to_nchw(inputs[0])],
                                           **self._onnx_window()))]


class Avgpool2DKernel(_Pool2D):
    """Mean over each window; zero padding; the divisor counts the explicit pads only when
    count_include_pad is 1 (never the ceil-mode extension), as onnxruntime does."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.divisor = self._valid_taps(spec.value("count_include_pad"))

    def run(self, x: np.ndarray) -> np.ndarray:
        xp = pad_nhwc(x, self.pads, 0.0)
        views = (view for _, _, view in self._taps(xp))
        acc = np.array(next(views), dtype=np.float32)
        for view in views:
            acc += view
        acc /= self.divisor
        return acc

    def passes_nonfinite(self, index: int) -> bool:
        """When the windows read every input position: a sum holding inf or NaN is one."""
        return reads_every_pixel(self.input_hw, self.explicit_pads, self.kernel_hw,
                                 self.strides, self.dilation, self.out_hw)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX AveragePool (NCHW), whose divisor rule is this kernel's; none when dilated
        (AveragePool takes dilations only from opset 19)."""
        if self.dilation != (1, 1) or self._ceil_extends():
            return None
        pool = builder.op("AveragePool", [builder.to_nchw(inputs[0])], **self._onnx_window(),
                          count_include_pad=int(self.spec.value("count_include_pad")))
        return [builder.to_nhwc(pool)]


class _GlobalPool2D(Kernel):
    """Shared shape check: [N, H, W, C] -> [N, 1, 1, C]."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, _, _, c = spec.input_rank(0, 4)
        spec.expect_shape((n, 1, 1, c))


class GlobalAvgpool2DKernel(_GlobalPool2D):
    """Mean over H and W, summed in float32."""

    def run(self, x: np.ndarray) -> np.ndarray:
        return x.mean(axis=(1, 2), keepdims=True, dtype=np.float32)

    def passes_nonfinite(self, index: int) -> bool:
        """A mean holding inf or NaN is inf or NaN."""
        return True

    def finite_on_finite(self) -> bool:
        """A mean of float16 values cannot overflow (``ReduceMeanKernel.finite_on_finite``)."""
        return True

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("ReduceMean", [inputs[0]], axes=[1, 2], keepdims=1)]


class GlobalMaxpool2DKernel(_GlobalPool2D):
    """Max over H and W."""

    exact = True

    def run(self, x: np.ndarray) -> np.ndarray:
        return x.max(axis=(1, 2), keepdims=True)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("ReduceMax", [inputs[0]], axes=[1, 2], keepdims=1)]


_SOURCE = "apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc"
_WINDOW = (
    _LAYOUT,
    ints("pool_size", "[kh, kw]", 2),
    ints("kernel_layout_shape", "[kh, kw] (the window again, as upstream writes it)", 2),
    written("kernel_layout", "HW", "as upstream writes it"),
    ints("strides", "[sh, sw]", 2, default=(1, 1)),
    ints("padding", "[top, left, bottom, right]", 4, default=(0, 0, 0, 0)),
    ints("dilation", "[dh, dw]", 2, default=(1, 1)),
    Attr("ceil_mode", "flag", "1: the last window may run past the input", default=False),
)

MAXPOOL = LayerKind(
    name="Maxpool2D", summary="max over each window; padding never wins (pads with -inf)",
    kernel=Maxpool2DKernel, lower=_lower("Maxpool2D"), one_of_roles=roles("pool", "pair"),
    attrs=_WINDOW, source=_SOURCE)
AVGPOOL = LayerKind(
    name="Avgpool2D", summary="mean over each window; pads with zeros, and the divisor counts "
                              "pads only when count_include_pad is 1",
    kernel=Avgpool2DKernel, lower=_lower("Avgpool2D"), required_roles=roles("pool"),
    attrs=_WINDOW + (Attr("count_include_pad", "flag", "1: the divisor counts the pads",
                          default=False),),
    quantizable=True, source=_SOURCE)
GLOBAL_AVGPOOL = LayerKind(
    name="GlobalAvgpool2D", summary="mean over H and W: `[N, H, W, C]` -> `[N, 1, 1, C]`",
    kernel=GlobalAvgpool2DKernel, lower=_lower("GlobalAvgpool2D"), required_roles=roles("pool"),
    attrs=(_LAYOUT,), quantizable=True, source=_SOURCE)
GLOBAL_MAXPOOL = LayerKind(
    name="GlobalMaxpool2D", summary="max over H and W: `[N, H, W, C]` -> `[N, 1, 1, C]`",
    kernel=GlobalMaxpool2DKernel, lower=_lower("GlobalMaxpool2D"), required_roles=roles("pool"),
    attrs=(_LAYOUT,), source=_SOURCE)
