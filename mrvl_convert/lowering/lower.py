"""Lowering: turn each matched composite of a Mrvl stage into a typed ``Layer``.

Requires: one Mrvl ``Stage`` of the plan. Ensures: a ``MrvlSubgraph`` whose layers are in the
accelerator's layout (NHWC activations, OHWI kernels), each built by its layer kind's own lowering
(``mrvl_convert/layers``), and whose outputs are handed back in their ONNX layout.
"""
from __future__ import annotations

from typing import Mapping, Optional

from mrvl_convert.layers import layer_kind
from mrvl_convert.layers.qnn import lower as qnn
from mrvl_convert.ir.layout import LayoutContext, MrvlSubgraph, identity
from mrvl_convert.ir.stages import Stage


def lower_stage(stage: Stage, copies: Optional[Mapping[str, str]] = None) -> MrvlSubgraph:
    """Lower every composite of a Mrvl stage, then hand its outputs back in ONNX layout.

    ``copies``: nodes canonicalize copied (a DequantizeLinear per consumer, ``qdq.py``) -> the
    model's node; layers name the model's node among their ``source_nodes``."""
    ctx = LayoutContext(stage)
    for unit in stage.units:
        kind = layer_kind(unit.composite.rule.layer)
        if qnn.is_quantized(unit.composite):
            qnn.lower(unit.composite, ctx, kind.lower)
        else:
            kind.lower(unit.composite, ctx)
    for layer in ctx.layers:
        layer.source_nodes = [(copies or {}).get(n, n) for n in layer.source_nodes]
    heads = [ctx.require(t, identity(len(ctx.layout(t).shape)))[0] for t in stage.outputs]
    return MrvlSubgraph(stage.name, list(stage.inputs), ctx.input_layouts, ctx.layers, heads,
                        list(stage.outputs))
