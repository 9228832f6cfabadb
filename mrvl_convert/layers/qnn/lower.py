"""int8 forms of the Marvell layers, from QDQ models (onnxruntime ``quantize_static``, QDQ).

A QDQ region ``DequantizeLinear -> op -> QuantizeLinear`` (rules/marvell/qnn.yaml) lowers to the
op's own layer kind carrying per-tensor scales, as the newer Marvell codegen writes its int8
composites (princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``CreateCompositeMrvlQnnConv2DLayer``,
``CreateCompositeMrvlQnnFcLayer``, ``CreateCompositeMrvlQnnSumLayer``,
``CreateCompositeMrvlQnnAvgpool2DLayer``, ``CreateCompositeMrvlQnnGlobalAvgpool2DLayer``,
``CreateMrvlQuantLayer``, ``SetScaleAttr``): Conv2D, FC (and Conv2DTranspose, which the codegen
writes in float only: ``conv_transpose.py``) ``input_scale``, ``weight_scale``,
``output_scale``; Sum2D, Mul2D and Sub ``lhs_input_scale``, ``rhs_input_scale``,
``output_scale``; pools and ReduceMean ``input_scale``, ``output_scale``; one float each, no zero
point; int8 weights and int32 biases. Region edges become ``quant`` layers: ``output_scale``
quantizes float32 to int8, ``input_scale`` dequantizes int8 to float32. The other int8 kinds
and forms have homes of their own: ``mul.py`` (Mul2D), ``conv_transpose.py``
(Conv2DTranspose), ``split.py`` (Split), ``activations.py`` (QnnSigmoid, QnnTanh),
``concat.py`` (Concat of int8 values), ``requant.py`` (requant: another scale), ``lut.py`` (the
LUT a Conv2D, FC, Sum2D, Mul2D or Conv2DTranspose fuses), ``unary.py`` (a clamp or a LUT no
layer fuses). Max pooling, Resize2D and layers that only move bytes run on the int8 values as
they are, as in the codegen, which writes no scale for them.

The number model is onnxruntime's run of the QDQ model as written: elementwise ops in float32
between dequantization and quantization (``kernels.py``), the ops that sum through onnxruntime
itself (``sums.py``, ``as_written.py``: why). Int8 activations flow as float32 arrays of
integers.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, conv_pads, present, static_shape
from mrvl_convert.ir.layout import (NHWC, Layer, LayoutContext, TensorLayout, default_labels,
                                    identity, native)
from mrvl_convert.ir.match import Composite
from mrvl_convert.core.graph import producer, scale_of
from mrvl_convert.kernels.conv_weights import block_diagonal
from mrvl_convert.layers.conv2d import channel_shuffle_order
from mrvl_convert.layers.qnn import concat as qnn_concat, kernels as qnn_kernels, mul as qnn_mul
from mrvl_convert.layers.qnn import conv_transpose as qnn_conv_transpose
from mrvl_convert.layers.qnn import lut, split as qnn_split, sums as qnn_sums, unary as qnn_unary
from mrvl_convert.layers._kind import (INT8_ACTIVATION, LUT_CONST, MARVELL, Activation, Attr,
                                       LayerKind, roles)
from mrvl_convert.layers._lowering import new_layer, spatial_out
from mrvl_convert.layers.qnn.requant import emit_with_requant

_SOURCE = ("princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc")


def _scale(name: str, doc: str) -> Attr:
    return Attr(name, "float", doc, default=None)


INPUT_SCALE = _scale("input_scale", "int8: scale of the input (one float, zero point 0)")
WEIGHT_SCALE = _scale("weight_scale", "int8: scale of the int8 kernel constant")
OUTPUT_SCALE = _scale("output_scale", "int8: scale of the int8 output")
LHS_INPUT_SCALE = _scale("lhs_input_scale", "int8: scale of the first operand")
RHS_INPUT_SCALE = _scale("rhs_input_scale", "int8: scale of the second operand (or constant)")

# The int8 attributes and kernel each quantizable kind gains (``int8_form``).
_INT8: Mapping[str, Tuple[Tuple[Attr, ...], type]] = MappingProxyType({
    "Conv2D": ((INPUT_SCALE, WEIGHT_SCALE, OUTPUT_SCALE), qnn_sums.Conv2DInt8Kernel),
    "FC": ((INPUT_SCALE, WEIGHT_SCALE, OUTPUT_SCALE), qnn_sums.FCInt8Kernel),
    "Sum2D": ((LHS_INPUT_SCALE, RHS_INPUT_SCALE, OUTPUT_SCALE), qnn_kernels.Sum2DInt8Kernel),
    "Avgpool2D": ((INPUT_SCALE, OUTPUT_SCALE), qnn_sums.Avgpool2DInt8Kernel),
    "GlobalAvgpool2D": ((INPUT_SCALE, OUTPUT_SCALE), qnn_sums.GlobalAvgpool2DInt8Kernel),
    "Mul2D": ((LHS_INPUT_SCALE, RHS_INPUT_SCALE, OUTPUT_SCALE), qnn_mul.Mul2DInt8Kernel),
    "Sub": ((LHS_INPUT_SCALE, RHS_INPUT_SCALE, OUTPUT_SCALE), qnn_kernels.SubInt8Kernel),
    "ReduceMean": ((INPUT_SCALE, OUTPUT_SCALE), qnn_sums.ReduceMeanInt8Kernel),
    "Conv2DTranspose": ((INPUT_SCALE, WEIGHT_SCALE, OUTPUT_SCALE),
                        qnn_conv_transpose.Conv2DTransposeInt8Kernel),
})
# The kinds whose int8 form may fuse a LUT (the codegen's ``take`` after the layer).
_LUT_KINDS = frozenset({"Conv2D", "FC", "Sum2D", "Mul2D", "Conv2DTranspose"})


def int8_form(kind: LayerKind) -> LayerKind:
    """``kind`` with its int8 attributes (declared after its own) and int8 kernel; the kinds
    that fuse a LUT take ``LUT`` as an activation and the LUT constant."""
    attrs, kernel = _INT8[kind.name]
    own, consts = kind.attrs, kind.consts
    if kind.name in _LUT_KINDS:
        own = tuple(INT8_ACTIVATION if a.name == INT8_ACTIVATION.name else a for a in own)
        consts = consts + (LUT_CONST,)
    return dataclasses.replace(kind, attrs=own + attrs, consts=consts, int8_kernel=kernel,
                               quantizable=True)


# ------------------------------------------------------------------------------------ lowering
def is_quantized(composite: Composite) -> bool:
    """Whether a composite is an int8 one (an int8 chain, or a region-edge quant layer)."""
    return composite.rule.layer == "quant" or composite.binding.node("in_dq") is not None


Lower = Callable[[Composite, LayoutContext], Optional[Sequence[Layer]]]


def lower(composite: Composite, ctx: LayoutContext, float_lower: Optional[Lower]) -> None:
    """Lower an int8 composite; ``float_lower`` is its kind's own lowering, which layers that
    only move or select values (Maxpool2D, reshape, ...) reuse on the int8 data. An own
    lowering may return the layers it made that stay float (the int8 Split's fp16 form)."""
    first = len(ctx.layers)
    own = _LOWER.get(composite.rule.layer)
    if composite.binding.node("pair") is not None:  # an int8 Max (a Maxpool2D rule)
        own = qnn_concat.lower_max_pair
    kept: Sequence[Layer] = ()
    if own is not None:
        kept = own(composite, ctx) or ()
    else:
        in_dq = composite.binding.node("in_dq")
        ctx.alias(in_dq.outputs[0], in_dq.inputs[0], ctx.layout(in_dq.inputs[0]))
        float_lower(composite, ctx)
        _add_pool_scales(composite, ctx.layers[first:])
    floats = {id(layer) for layer in kept}
    for layer in ctx.layers[first:]:
        if layer.kind != "quant" and id(layer) not in floats:
            layer.dtype = "int8"


def _add_pool_scales(composite: Composite, layers: List[Layer]) -> None:
    if composite.rule.layer not in ("Avgpool2D", "GlobalAvgpool2D", "ReduceMean"):
        return
    made = [layer for layer in layers if layer.rule == composite.rule.name][-1]
    made.attrs["input_scale"] = scale_of(composite.binding.node("in_dq"))
    made.attrs["output_scale"] = scale_of(composite.binding.node("out_q"))


def _output(composite: Composite) -> Tuple[float, Optional[Activation], List]:
    """The output scale, fused activation and its constants of a chain ending ``out_q [act_dq
    act act_q]`` (``lut.fused``: relu, exact in the layer's own output scale with a requant
    after it where the Relu has another scale; or a LUT, whose table maps to the act's scale)."""
    activation, consts = lut.fused(composite)
    return scale_of(composite.binding.node("out_q")), activation, consts


def _int_const(tensor: gs.Tensor, dtype: type) -> np.ndarray:
    """The integer constant a DequantizeLinear reads (rules checked it is one)."""
    return const_value(producer(tensor).inputs[0]).astype(dtype)


def _lower_conv(composite: Composite, ctx: LayoutContext) -> None:
    if composite.binding.node("shuffle") is not None:
        _lower_shuffle(composite, ctx)
        return
    conv, in_dq = composite.binding.node("conv"), composite.binding.node("in_dq")
    weights = _int_const(conv.inputs[1], np.int8)
    out_channels, _, kh, kw = weights.shape
    bias = present(conv, 2)
    bias = _int_const(bias, np.int32).reshape(-1) if bias is not None else \
        np.zeros(out_channels, np.int32)
    strides = attr(conv, "strides", [1, 1])
    dilations = attr(conv, "dilations", [1, 1])
    pads = conv_pads(conv, static_shape(conv.inputs[0]), [kh, kw], strides, dilations,
                     static_shape(conv.outputs[0]))
    groups = int(attr(conv, "group", 1))
    if groups > 1:
        # The int8 codegen expands depthwise and grouped kernels into one ordinary [O, I, KH, KW]
        # convolution (the added taps are zeros, exact).
        weights = block_diagonal(weights, groups)
    index, layout = ctx.require(in_dq.inputs[0], NHWC)
    output_scale, activation, fused_consts = _output(composite)
    attrs = {"strides": tuple(strides), "padding": tuple(pads), "dilation": tuple(dilations),
             "groups": 1, "channels": out_channels, "kernel_size": (kh, kw),
             "activation_type": activation, "input_scale": scale_of(in_dq),
             "weight_scale": scale_of(producer(conv.inputs[1])), "output_scale": output_scale}
    consts = [("kernel", np.ascontiguousarray(weights.transpose(0, 2, 3, 1))),
              ("bias", bias.reshape(1, 1, 1, out_channels))] + fused_consts
    layer = new_layer(composite, "Conv2D", [index], [layout], spatial_out(composite), attrs,
                      consts)
    layer.inexact = _bias_scale_note(conv, in_dq)
    emit_with_requant(composite, ctx, layer)


def _lower_shuffle(composite: Composite, ctx: LayoutContext) -> None:
    """A channel shuffle of int8 values in one scale (rules: ``shuffle_copies``) as the int8 1x1
    Conv2D whose int8 weight is the permutation matrix, weight scale 1, input and output scales
    the shuffle's one scale: each output is 1 x one input, requantized by s x 1 / s, a copy."""
    in_dq = composite.binding.node("in_dq")
    channels = static_shape(in_dq.outputs[0])[1]
    weights = np.zeros((channels, 1, 1, channels), np.int8)   # OHWI
    weights[np.arange(channels), 0, 0, channel_shuffle_order(composite)] = 1
    scale = scale_of(in_dq)
    index, layout = ctx.require(in_dq.inputs[0], NHWC)
    attrs = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
             "channels": channels, "kernel_size": (1, 1), "activation_type": None,
             "input_scale": scale, "weight_scale": 1.0, "output_scale": scale}
    consts = [("kernel", weights), ("bias", np.zeros((1, 1, 1, channels), np.int32))]
    ctx.emit(new_layer(composite, "Conv2D", [index], [layout], spatial_out(composite), attrs,
                       consts), composite.output)


def _lower_fc(composite: Composite, ctx: LayoutContext) -> None:
    fc, in_dq = composite.binding.node("fc"), composite.binding.node("in_dq")
    source = in_dq.inputs[0]
    layout = ctx.layout(source)
    rank = len(layout.shape)  # 2, or 3: tokens [B, T, C] (mrvl.qnn_fc_tokens)
    if layout.scrambled_from is not None:
        index = ctx.values[source.name][0]
    else:
        index, layout = ctx.require(source, identity(rank))
    weights = _int_const(fc.inputs[1], np.int8)
    if fc.op == "MatMul" or not int(attr(fc, "transB", 0)):
        weights = weights.T
    out_features = weights.shape[0]
    bias = present(fc, 2) if fc.op == "Gemm" else _added_bias(composite)
    bias = np.broadcast_to(_int_const(bias, np.int32).reshape(-1), (out_features,)) \
        if bias is not None else np.zeros(out_features, np.int32)
    inexact = _bias_scale_note(fc, in_dq, bias_of=present(fc, 2) if fc.op == "Gemm" else
                               _added_bias(composite))
    if layout.scrambled_from is not None:
        # The flatten kept the producer's NHWC order: reorder the weight columns to match.
        logical, perm = layout.scrambled_from
        reordered = weights.reshape([out_features] + list(logical[1:]))
        reordered = reordered.transpose([0] + list(perm[1:])).reshape(out_features, -1)
        if sum(d > 1 for d in logical[1:]) > 1:
            inexact = _PERMUTED_FC
        weights = reordered
        layout = TensorLayout(layout.shape, (0, 1), layout.labels)
    output_scale, activation, fused_consts = _output(composite)
    attrs = {"activation_type": activation, "input_scale": scale_of(in_dq),
             "weight_scale": scale_of(producer(fc.inputs[1])), "output_scale": output_scale}
    consts = [("kernel", np.ascontiguousarray(weights)),
              ("bias", np.ascontiguousarray(bias, dtype=np.int32).reshape(1, out_features))] \
        + fused_consts
    out = TensorLayout(tuple(static_shape(composite.output)), identity(rank),
                       default_labels(rank))
    layer = new_layer(composite, "FC", [index], [layout], out, attrs, consts)
    layer.inexact = inexact
    emit_with_requant(composite, ctx, layer)


_PERMUTED_FC = ("int8 FC reading an NHWC flatten: its weight columns permuted, MLAS sums the "
                "products in another order than the model's Gemm: a step where a value lies "
                "within float32 rounding of a rounding boundary")


def _added_bias(composite: Composite) -> Optional[gs.Tensor]:
    """The int32 bias of a token FC's Add (``mrvl.qnn_fc_tokens``' bias role), or None."""
    add = composite.binding.node("bias")
    return add.inputs[1] if add is not None else None


def _bias_scale_note(node: gs.Node, in_dq: gs.Node, bias_of: Optional[gs.Tensor] = None) -> str:
    """Why the layer's bias is not dequantized as the model does (its scale is not the float32
    product input_scale x weight_scale, which is all the Nodes-JSON can say), or "". ``bias_of``:
    the bias when it is not the node's input 2 (an Add's)."""
    bias = bias_of if bias_of is not None else \
        present(node, 2) if node.op in ("Conv", "ConvTranspose", "Gemm") else None
    if bias is None:
        return ""
    product = np.float32(scale_of(in_dq)) * np.float32(scale_of(producer(node.inputs[1])))
    if np.float32(scale_of(producer(bias))) == product:
        return ""
    return (f"bias scale {scale_of(producer(bias))!r} is not input_scale x weight_scale "
            f"({float(product)!r}) in float32: the bias is dequantized with the product, a step "
            f"where a value lies that close to a rounding boundary")


def _lower_conv_transpose(composite: Composite, ctx: LayoutContext) -> None:
    conv, in_dq = composite.binding.node("conv"), composite.binding.node("in_dq")
    qnn_conv_transpose.lower(composite, ctx, _bias_scale_note(conv, in_dq))


def _lower_add(composite: Composite, ctx: LayoutContext) -> None:
    """Two int8 activations, or one and an int8 constant (always the rhs: the sum commutes);
    or the carrier of a LUT no layer before it fuses (``unary.py``)."""
    if composite.binding.node("lut") is not None:
        qnn_unary.lower_lut(composite, ctx)
        return
    add = composite.binding.node("add")
    dequantized, indices, layouts, consts = qnn_mul.int8_operands(add, ctx)
    output_scale, activation, fused_consts = _output(composite)
    attrs = {"activation_type": activation, "lhs_input_scale": scale_of(dequantized[0]),
             "rhs_input_scale": scale_of(dequantized[1]), "output_scale": output_scale}
    out = TensorLayout(tuple(static_shape(composite.output)), layouts[0].perm, layouts[0].labels)
    layer = new_layer(composite, "Sum2D", indices, layouts, out, attrs, consts + fused_consts)
    emit_with_requant(composite, ctx, layer)


def _lower_sub(composite: Composite, ctx: LayoutContext) -> None:
    """a - b of two int8 activations, b broadcasting into a (rules: ``qdq_difference``)."""
    sub = composite.binding.node("sub")
    perm = native(len(static_shape(sub.outputs[0])))
    dequantized = [producer(t) for t in sub.inputs]
    required = [ctx.require(dq.inputs[0], perm) for dq in dequantized]
    attrs = {"activation_type": None, "lhs_input_scale": scale_of(dequantized[0]),
             "rhs_input_scale": scale_of(dequantized[1]),
             "output_scale": scale_of(composite.binding.node("out_q"))}
    layouts = [layout for _, layout in required]
    out = TensorLayout(tuple(static_shape(composite.output)), perm, layouts[0].labels)
    ctx.emit(new_layer(composite, "Sub", [i for i, _ in required], layouts, out, attrs),
             composite.output)


def _lower_quant(composite: Composite, ctx: LayoutContext) -> None:
    """A region edge: QuantizeLinear (float32 -> int8) or DequantizeLinear (int8 -> float32),
    elementwise, in whatever layout its input already has. A QuantizeLinear of a value an int8
    layer wrote (an output of an int8 Split: its rule checked the scale is the Split input's)
    is no edge: the int8 value itself (quantize(q * s / s) is q)."""
    node = composite.binding.node("edge")
    index, layout = ctx.values[node.inputs[0].name]
    if node.op == "QuantizeLinear" and ctx.dtype_of(int(index)) == "int8":
        ctx.alias(node.outputs[0], node.inputs[0], layout)
        return
    index, layout = ctx.require(node.inputs[0], layout.perm)
    key = "output_scale" if node.op == "QuantizeLinear" else "input_scale"
    attrs = {key: scale_of(node), "src_layout": layout.name, "dst_layout": layout.name}
    out = TensorLayout(tuple(static_shape(composite.output)), layout.perm, layout.labels)
    layer = new_layer(composite, "quant", [index], [layout], out, attrs)
    layer.dtype = "int8" if node.op == "QuantizeLinear" else "float32"
    ctx.emit(layer, composite.output)


_LOWER: Mapping[str, Lower] = MappingProxyType({
    "Conv2D": _lower_conv, "FC": _lower_fc, "Sum2D": _lower_add, "quant": _lower_quant,
    "Mul2D": qnn_mul.lower, "Concat": qnn_concat.lower, "Clip": qnn_unary.lower_clamp,
    "Sub": _lower_sub, "Conv2DTranspose": _lower_conv_transpose, "Split": qnn_split.lower})


def _no_float_lowering(composite: Composite, ctx: LayoutContext) -> None:
    raise AssertionError("quant layers are lowered by qnn.lower")  # pragma: no cover


QUANT = LayerKind(
    name="quant",
    summary="int8 region edge: with `output_scale` out = saturate(round_half_even(in / scale)) "
            "(float32 -> int8); with `input_scale` out = in * scale (int8 -> float32)",
    kernel=qnn_kernels.QuantKernel,
    lower=_no_float_lowering,
    required_roles=roles("edge"),
    attrs=(INPUT_SCALE, OUTPUT_SCALE,
           Attr("src_layout", "str", "layout of the input, e.g. NHWC"),
           Attr("dst_layout", "str", "layout of the output (= src_layout)")),
    layer_sets=frozenset({MARVELL}),
    composite="mrvl.quant_mrvl",
    source=_SOURCE + " CreateMrvlQuantLayer",
)

__all__ = ["QUANT", "int8_form", "is_quantized", "lower"]
