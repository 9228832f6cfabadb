"""Concat of int8 activations: ``DequantizeLinear``s -> Concat -> ``QuantizeLinear``.

The newer codegen has no int8 Concat of its own: ``CreateMrvlConcatLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc) writes
``axis`` and no scale, so the layer concatenates int8 values as they are, all in one scale. Its
mrvl.py ``concat_pattern`` admits a ``qnn.requantize`` after the concatenate, and a standalone
``qnn.requantize`` becomes a ``requant`` layer (composite ``mrvl.qnn_requantize``,
``CreateMrvlQuantLayer``): an input whose scale is not the output's is requantized to it first
by its own requant layer, which is what onnxruntime computes for the QDQ chain
(dequantize each input, concatenate, quantize: q * s_in / s_out per element, exact).
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.core.graph import producer, scale_of
from mrvl_convert.layers._lowering import new_layer
from mrvl_convert.layers._max_pairs import pool_operands
from mrvl_convert.layers.qnn.requant import emit_requant


def lower(composite: Composite, ctx: LayoutContext) -> None:
    concat = composite.binding.node("concat")
    rank = len(static_shape(concat.outputs[0]))
    perm = native(rank)
    indices, layouts = zip(*_on_output_grid(composite, ctx, concat, perm))
    axis = int(attr(concat, "axis", 1)) % rank
    out = TensorLayout(tuple(static_shape(composite.output)), perm, layouts[0].labels)
    ctx.emit(new_layer(composite, "Concat", list(indices), list(layouts), out,
                       {"axis": perm.index(axis)}), composite.output)


def lower_max_pair(composite: Composite, ctx: LayoutContext) -> None:
    """``DequantizeLinear``s -> Max -> ``QuantizeLinear`` (``mrvl.qnn_max_pair``): each operand
    on the output's grid, requantized where its scale differs (onnxruntime's ``q s_in / s_out``,
    as for a Concat), then ``_max_pairs.py``'s layers on the int8 values. Quantizing is
    nondecreasing, so the max of the quantized operands is the quantized max: exact."""
    node = composite.binding.node("pair")
    perm = ctx.keep_order(producer(node.inputs[0]).inputs[0],
                          native(len(static_shape(node.outputs[0]))))
    pool_operands(composite, ctx, _on_output_grid(composite, ctx, node, perm))


def _on_output_grid(composite: Composite, ctx: LayoutContext, node: gs.Node,
                    perm: Sequence[int]) -> List[Tuple[int, TensorLayout]]:
    """Each dequantized input of ``node`` in ``perm``, requantized to the output's scale where
    its own differs (a requant layer each): (layer index, layout) per input, in order."""
    out_scale = scale_of(composite.binding.node("out_q"))
    pairs = []
    for dq in (producer(t) for t in node.inputs):
        index, layout = ctx.require(dq.inputs[0], perm)
        if scale_of(dq) != out_scale:
            index = emit_requant(composite, ctx, index, layout, (scale_of(dq), out_scale), None)
        pairs.append((index, layout))
    return pairs
