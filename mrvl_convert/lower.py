"""Lowering: one builder per Marvell layer kind, turning a matched composite into a ``Layer``.

A builder reads the composite's roles (see ``rules.model.LAYER_ROLES``), asks the
``LayoutContext`` for its inputs in the layout the layer needs, and emits the layer with its
kind-specific attributes and constants already in the accelerator's layout (OHWI, NHWC).
Attribute values are lists of strings, as upstream writes them.
"""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np

from ._graph import (activation_inputs, attr, conv_pads, const_value, is_const, pad_amounts,
                     present, squeeze_axes, static_shape)
from .layout import (NHWC, Layer, LayoutContext, MrvlSubgraph, TensorLayout,
                     default_labels, identity, native, transpose_layout)
from .partition import Stage
from .rules.matcher import Composite


def _s(values) -> List[str]:
    return [str(int(v)) for v in values]


def _act(composite: Composite, attrs: dict) -> None:
    if composite.binding.node("act") is not None:
        attrs["activation_type"] = ["relu"]


def _new(composite: Composite, kind: str, inputs, in_layouts, out_layout, attrs, consts=()):
    return Layer(kind=kind, composite=composite.rule.name, rule=composite.rule.name,
                 source_nodes=[n.name for n in composite.nodes], inputs=list(inputs),
                 in_layouts=list(in_layouts), out_layout=out_layout, attrs=attrs,
                 consts=list(consts))


def _spatial_out(composite: Composite) -> TensorLayout:
    return TensorLayout(tuple(static_shape(composite.output)), NHWC, "NCHW")


def lower_conv(composite: Composite, ctx: LayoutContext) -> None:
    conv = composite.binding.node("conv")
    pad = composite.binding.node("pad")
    source = pad.inputs[0] if pad is not None else conv.inputs[0]
    index, layout = ctx.require(source, NHWC)
    weights = const_value(conv.inputs[1]).astype(np.float32)
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
        gamma, beta, mean, var = (const_value(bn.inputs[i]).astype(np.float64) for i in (1, 2, 3, 4))
        scale = gamma / np.sqrt(var + float(attr(bn, "epsilon", 1e-5)))
        weights = (weights * scale[:, None, None, None]).astype(np.float32)
        bias = ((bias - mean) * scale + beta).astype(np.float32)
    groups = int(attr(conv, "group", 1))
    attrs = {"strides": _s(strides), "padding": _s(pads), "dilation": _s(dilations),
             "groups": _s([groups]), "channels": _s([out_channels]), "kernel_size": _s([kh, kw]),
             "kernel_layout": ["OHWI"], "bias_layout": ["---O"], "out_dtype": [""]}
    _act(composite, attrs)
    consts = [("kernel", np.ascontiguousarray(weights.transpose(0, 2, 3, 1))),
              ("bias", bias.reshape(1, 1, 1, out_channels))]
    ctx.emit(_new(composite, "Conv2D", [index], [layout], _spatial_out(composite), attrs, consts),
             composite.output)


def lower_fc(composite: Composite, ctx: LayoutContext) -> None:
    fc = composite.binding.node("fc")
    source = fc.inputs[0]
    layout = ctx.layout(source)
    if layout.scrambled_from is not None:
        index = ctx.values[source.name][0]
    else:
        index, layout = ctx.require(source, (0, 1))
    weights = const_value(fc.inputs[1]).astype(np.float32)
    if fc.op == "Gemm":
        weights = weights if int(attr(fc, "transB", 0)) else weights.T
        weights = weights * np.float32(attr(fc, "alpha", 1.0))
    else:
        weights = weights.T
    out_features = weights.shape[0]
    bias = np.zeros(out_features, np.float32)
    c = present(fc, 2) if fc.op == "Gemm" else None
    if c is not None:
        bias = bias + np.broadcast_to(const_value(c).astype(np.float32).reshape(-1),
                                      (out_features,)) * np.float32(attr(fc, "beta", 1.0))
    add = composite.binding.node("bias")
    if add is not None:
        const = [t for t in add.inputs if is_const(t)][0]
        bias = bias + np.broadcast_to(const_value(const).astype(np.float32).reshape(-1),
                                      (out_features,))
    if layout.scrambled_from is not None:
        # The flatten kept the producer's NHWC order: reorder the weight columns to match.
        logical, perm = layout.scrambled_from
        weights = weights.reshape([out_features] + list(logical[1:]))
        weights = weights.transpose([0] + list(perm[1:])).reshape(out_features, -1)
        layout = TensorLayout(layout.shape, (0, 1), layout.labels)
    attrs = {"kernel_layout": ["OI"], "bias_layout": ["-O"], "out_dtype": ["float32"],
             "units": [""]}
    _act(composite, attrs)
    consts = [("kernel", np.ascontiguousarray(weights, dtype=np.float32)),
              ("bias", bias.astype(np.float32).reshape(1, out_features))]
    out = TensorLayout(tuple(static_shape(composite.output)), (0, 1), "NC")
    ctx.emit(_new(composite, "FC", [index], [layout], out, attrs, consts), composite.output)


def _lower_pool(kind: str) -> Callable[[Composite, LayoutContext], None]:
    def lower(composite: Composite, ctx: LayoutContext) -> None:
        pool = composite.binding.node("pool")
        index, layout = ctx.require(pool.inputs[0], NHWC)
        attrs: Dict[str, list] = {"layout": ["NHWC"]}
        if kind in ("Maxpool2D", "Avgpool2D"):
            kernel = attr(pool, "kernel_shape")
            strides = attr(pool, "strides", [1, 1])
            dilations = attr(pool, "dilations", [1, 1])
            pads = conv_pads(pool, static_shape(pool.inputs[0]), kernel, strides, dilations,
                             static_shape(pool.outputs[0]))
            attrs.update({"pool_size": _s(kernel), "kernel_layout_shape": _s(kernel),
                          "kernel_layout": ["HW"], "strides": _s(strides), "padding": _s(pads),
                          "dilation": _s(dilations), "ceil_mode": _s([attr(pool, "ceil_mode", 0)])})
            if kind == "Avgpool2D":
                attrs["count_include_pad"] = _s([attr(pool, "count_include_pad", 0)])
        ctx.emit(_new(composite, kind, [index], [layout], _spatial_out(composite), attrs),
                 composite.output)
    return lower


def lower_sum(composite: Composite, ctx: LayoutContext) -> None:
    add = composite.binding.node("add")
    rank = len(static_shape(add.outputs[0]))
    perm = native(rank)
    indices, layouts, consts = [], [], []
    for tensor in add.inputs:
        if is_const(tensor):
            value = const_value(tensor).astype(np.float32)
            value = value.reshape([1] * (rank - value.ndim) + list(value.shape)).transpose(perm)
            consts.append(("operand", np.ascontiguousarray(value)))
            continue
        index, layout = ctx.require(tensor, perm)
        indices.append(index)
        layouts.append(layout)
    attrs: Dict[str, list] = {}
    _act(composite, attrs)
    out = TensorLayout(tuple(static_shape(composite.output)), perm, layouts[0].labels)
    ctx.emit(_new(composite, "Sum2D", indices, layouts, out, attrs, consts), composite.output)


def lower_concat(composite: Composite, ctx: LayoutContext) -> None:
    concat = composite.binding.node("concat")
    rank = len(static_shape(concat.outputs[0]))
    perm = native(rank)
    pairs = [ctx.require(t, perm) for t in activation_inputs(concat)]
    axis = int(attr(concat, "axis", 1)) % rank
    out = TensorLayout(tuple(static_shape(composite.output)), perm, pairs[0][1].labels)
    attrs = {"axis": _s([perm.index(axis)])}
    ctx.emit(_new(composite, "Concat", [p[0] for p in pairs], [p[1] for p in pairs], out, attrs),
             composite.output)


def _flatten_feeds_fc_only(composite: Composite, ctx: LayoutContext) -> bool:
    out = composite.output
    if out.name in {t.name for t in ctx.stage.outputs}:
        return False
    consumers = out.outputs
    fc_nodes = {u.composite.binding.node("fc").name for u in ctx.stage.units
                if u.composite is not None and u.composite.rule.layer == "FC"}
    return bool(consumers) and all(c.name in fc_nodes and c.inputs[0] is out for c in consumers)


def _lower_reshape(kind: str) -> Callable[[Composite, LayoutContext], None]:
    def lower(composite: Composite, ctx: LayoutContext) -> None:
        node = composite.binding.node("main")
        source = node.inputs[0]
        current = ctx.layout(source)
        rank_out = len(static_shape(composite.output))
        if (kind == "nn.batch_flatten" and current.scrambled_from is None
                and not current.bytes_like(range(len(current.shape)))
                and current.perm[0] == 0 and _flatten_feeds_fc_only(composite, ctx)):
            index = ctx.values[source.name][0]
            out = TensorLayout(tuple(static_shape(composite.output)), (0, 1), "NC",
                               scrambled_from=(current.shape, current.perm))
            ctx.emit(_new(composite, kind, [index], [current], out, {}), composite.output)
            return
        index, layout = ctx.require(source, tuple(range(len(current.shape))), any_shape=True)
        # A reshape keeping the rank keeps the axis names; otherwise they start afresh.
        labels = layout.labels if rank_out == len(layout.labels) else default_labels(rank_out)
        out = TensorLayout(tuple(static_shape(composite.output)), tuple(range(rank_out)), labels)
        attrs = {"axes": _s(squeeze_axes(node))} if kind == "squeeze" else {}
        ctx.emit(_new(composite, kind, [index], [layout], out, attrs), composite.output)
    return lower


def lower_transpose(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("transpose")
    source = node.inputs[0]
    layout = transpose_layout(ctx.layout(source), attr(node, "perm"),
                              static_shape(composite.output))
    ctx.alias(composite.output, source, layout)


LOWER: Dict[str, Callable[[Composite, LayoutContext], None]] = {
    "Conv2D": lower_conv,
    "FC": lower_fc,
    "Maxpool2D": _lower_pool("Maxpool2D"),
    "Avgpool2D": _lower_pool("Avgpool2D"),
    "GlobalAvgpool2D": _lower_pool("GlobalAvgpool2D"),
    "GlobalMaxpool2D": _lower_pool("GlobalMaxpool2D"),
    "Sum2D": lower_sum,
    "Concat": lower_concat,
    "reshape": _lower_reshape("reshape"),
    "nn.batch_flatten": _lower_reshape("nn.batch_flatten"),
    "squeeze": _lower_reshape("squeeze"),
    "layout_transform": lower_transpose,
}


def lower_stage(stage: Stage) -> MrvlSubgraph:
    """Lower every composite of a Mrvl stage, then hand its outputs back in ONNX layout."""
    ctx = LayoutContext(stage)
    for unit in stage.units:
        LOWER[unit.composite.rule.layer](unit.composite, ctx)
    heads = [ctx.require(t, identity(len(ctx.layout(t).shape)))[0] for t in stage.outputs]
    return MrvlSubgraph(stage.name, list(stage.inputs), ctx.input_layouts, ctx.layers, heads,
                        list(stage.outputs))
