"""Split of int8 activations: ``DequantizeLinear -> Split``, each output read only by
QuantizeLinears of the input's scale (rules/marvell/qnn.yaml ``mrvl.qnn_split``).

The newer codegen's Split (princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``CreateMrvlSplitLayer``) writes ``axis`` and no scale:
it cuts the int8 values as they are. onnxruntime's QDQ run dequantizes, splits and quantizes
each piece with the one scale, which gives each int8 value back (quantize(q * s / s) is q), so
the int8 layer is exact, and the QuantizeLinear after each piece is no layer at all
(``lower._lower_quant``).

The Split's ONNX outputs are float32 tensors that here carry int8 values; only the
QuantizeLinears after them may read them. Where one of those lies in another stage (denied by
the user, or sent to CPU), that stage would read the Split's output as float: the Split is then
lowered as the exact fp16 form instead (a quant layer dequantizing its input, the float Split,
the QuantizeLinears as quant layers).
"""
from __future__ import annotations

from typing import List

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import scale_of, static_shape
from mrvl_convert.ir.layout import Layer, LayoutContext, TensorLayout
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers import split as float_split
from mrvl_convert.layers._lowering import new_layer


def lower(composite: Composite, ctx: LayoutContext) -> List[Layer]:
    """Lower the Split on the int8 values; returns the layers that stay float (none, or the
    fp16 form's where a reader of a piece is outside this stage)."""
    in_dq, split = composite.binding.node("in_dq"), composite.binding.node("split")
    source = in_dq.inputs[0]
    inside = {n.name for n in ctx.stage.nodes}
    if all(r.name in inside for t in split.outputs for r in t.outputs):
        ctx.alias(in_dq.outputs[0], source, ctx.layout(source))
        first = len(ctx.layers)
        float_split.lower(composite, ctx)
        _stands_for_its_quantize(ctx.layers[first:], split)
        return []
    index, layout = ctx.values[source.name]
    attrs = {"input_scale": scale_of(in_dq), "src_layout": layout.name,
             "dst_layout": layout.name}
    out = TensorLayout(tuple(static_shape(in_dq.outputs[0])), layout.perm, layout.labels)
    first = len(ctx.layers)
    ctx.emit(new_layer(composite, "quant", [index], [layout], out, attrs), in_dq.outputs[0])
    float_split.lower(composite, ctx)
    return ctx.layers[first:]


def _stands_for_its_quantize(layers: List[Layer], split: gs.Node) -> None:
    """The int8 Split's first output is the int8 value the QuantizeLinear after it would give
    back (that QuantizeLinear is no layer): the layer names it among its source nodes, last, so
    that a per-layer comparison reads the QuantizeLinear's int8 output, the value the layer
    holds, and not the Split's float one (dequantized: off by the scale, issue 45)."""
    quantizers = [r for r in split.outputs[0].outputs if r.op == "QuantizeLinear"]
    if layers and quantizers:
        layers[-1].source_nodes = [*layers[-1].source_nodes, quantizers[0].name]
