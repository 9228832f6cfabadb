"""requant: int8 -> int8 with another scale, out = saturate(round_half_even(in * input_scale /
output_scale)) computed as onnxruntime computes ``DequantizeLinear -> QuantizeLinear``: q * s_in
in float32, then divided by s_out in float32, saturated, rounded half to even.

The newer codegen writes it for a ``qnn.requantize`` left standalone (mrvl.py composite
``mrvl.qnn_requantize``): ``CreateMrvlQuantLayer`` names the layer ``requant`` and
``SetMrvlQuantAttrs`` gives it ``input_scale`` (requantize's args[1]) and ``output_scale``
(args[3]), with ``src_layout`` = ``dst_layout`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc).

Where it appears here: after a layer whose fused Relu (or a Clip that is a Relu at the output
scale) is quantized with a scale of its own (onnxruntime 1.18's ``quantize_static`` gives the Relu
after a Conv its own scale); for a ``Min`` against a constant the output range saturates anyway
(MobileNet's ``Min(Relu(x), 6)``); in front of a Concat input whose scale is not the output's;
and in front of an integer clamp whose output scale is not its input's (``unary.py``).
The codegen instead folds a requantize that follows a layer's activation into that layer
(``UnpackCompositeConvolution`` ``instrument_4``: the layer's ``output_scale`` becomes the
requantize's), which rounds once instead of twice and so can differ from onnxruntime's run of the
QDQ model by one step; the separate layer keeps the simulator on onnxruntime's number model.
No ``q_min_<n>``/``q_max_<n>``: the codegen writes those only for ``simulated_quantize``, its own
calibration's annotation, never for a QDQ model.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.ir.layout import Layer, LayoutContext, TensorLayout
from mrvl_convert.ir.match import Composite
from mrvl_convert.core.graph import scale_of
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers.qnn import kernels as qnn_kernels
from mrvl_convert.layers._kind import MARVELL, Activation, Attr, LayerKind, roles
from mrvl_convert.layers._lowering import new_layer

SOURCE = ("princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
          "src/relay/backend/contrib/mrvl/codegen.cc CreateMrvlQuantLayer (qnn.requantize)")


class RequantKernel(qnn_kernels.ElementwiseEdgeKernel):
    """int8 values re-expressed in output_scale (onnxruntime's DequantizeLinear then
    QuantizeLinear, both in float32)."""

    layer = "requant"

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        self.scales = (spec.value("input_scale"), spec.value("output_scale"))

    def run(self, x: np.ndarray) -> np.ndarray:
        return qnn_kernels.quantize(qnn_kernels.dequantize(x, self.scales[0]), self.scales[1])


def emit_requant(composite: Composite, ctx: LayoutContext, index: int, layout: TensorLayout,
                 scales: "tuple[float, float]", output: Optional[gs.Tensor]) -> int:
    """A requant layer on value ``index`` (in ``layout``); ``output`` None: an intermediate
    value of the composite (the per-layer comparison skips it)."""
    attrs = {"input_scale": scales[0], "output_scale": scales[1],
             "src_layout": layout.name, "dst_layout": layout.name}
    layer = new_layer(composite, "requant", [index], [layout], layout, attrs)
    layer.dtype = "int8"
    if output is None:
        layer.source_nodes = []
    return ctx.emit(layer, output)


def emit_with_requant(composite: Composite, ctx: LayoutContext, layer: Layer) -> None:
    """Emit ``layer`` for the composite's output, or, where its fused Relu is quantized with a
    scale of its own (``act_q``, onnxruntime 1.18), as an intermediate value and a requant (a
    LUT maps to the act's scale itself)."""
    act_q = composite.binding.node("act_q")
    if act_q is None or layer.attrs.get("activation_type") is Activation.LUT \
            or scale_of(act_q) == layer.attrs["output_scale"]:
        ctx.emit(layer, composite.output)
        return
    layer.source_nodes = []
    index = ctx.emit(layer, None)
    emit_requant(composite, ctx, index, layer.out_layout,
                 (layer.attrs["output_scale"], scale_of(act_q)), composite.output)


def _lower_alone(composite: Composite, ctx: LayoutContext) -> None:
    """``DequantizeLinear -> Min(x, c) -> QuantizeLinear`` whose clamp the output range already
    makes (rules: ``vacuous_clamp``): a requant of the dequantized input."""
    in_dq, out_q = composite.binding.node("in_dq"), composite.binding.node("out_q")
    index, layout = ctx.values[in_dq.inputs[0].name]
    emit_requant(composite, ctx, index, layout, (scale_of(in_dq), scale_of(out_q)),
                 composite.output)


KIND = LayerKind(
    name="requant",
    summary="int8 -> int8: out = saturate(round_half_even(float32(in * input_scale) / "
            "output_scale))",
    kernel=RequantKernel,
    lower=_lower_alone,
    required_roles=roles("in_dq", "out_q"),
    optional_roles=roles("clamp"),
    attrs=(Attr("input_scale", "float", "int8: scale of the input"),
           Attr("output_scale", "float", "int8: scale of the output"),
           Attr("src_layout", "str", "layout of the input, e.g. NHWC"),
           Attr("dst_layout", "str", "layout of the output (= src_layout)")),
    layer_sets=frozenset({MARVELL}),
    source=SOURCE,
)
