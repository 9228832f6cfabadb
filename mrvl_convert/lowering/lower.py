"""Lowering: turn each matched composite of a Mrvl stage into a typed ``Layer``.

Requires: one Mrvl ``Stage`` of the plan. Ensures: a ``MrvlSubgraph`` whose layers are in the
accelerator's layout (NHWC activations, OHWI kernels), each built by its layer kind's own lowering
(``mrvl_convert/layers``), and whose outputs are handed back in their ONNX layout.

With ``chunks=(N, b)`` (a per-sample stage of batch N run N/b times: ``rules/batch_axis.py``
``batch_runs``) the layers are lowered on the stage seen at batch b: every tensor of the stage
whose axis 0 is N reads b for the time of the lowering (restored after, so the manifest and the
CPU stages keep the model's N), and the subgraph's ``runs`` is N/b.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping, Optional, Tuple

from mrvl_convert.core.graph import all_inputs, is_const, static_shape
from mrvl_convert.layers import layer_kind
from mrvl_convert.layers.qnn import lower as qnn
from mrvl_convert.ir.layout import LayoutContext, MrvlSubgraph, identity
from mrvl_convert.ir.stages import Stage


def lower_stage(stage: Stage, copies: Optional[Mapping[str, str]] = None,
                chunks: Optional[Tuple[int, int]] = None) -> MrvlSubgraph:
    """Lower every composite of a Mrvl stage, then hand its outputs back in ONNX layout.

    ``copies``: nodes canonicalize copied (a DequantizeLinear per consumer, ``qdq.py``) -> the
    model's node; layers name the model's node among their ``source_nodes``. ``chunks``: (the
    stage's batch N, the batch b its layers are compiled at), see the module docstring."""
    if chunks is None:
        return _lower(stage, copies)
    batch, device = chunks
    with _batch_view(stage, batch, device):
        sub = _lower(stage, copies)
    sub.runs = batch // device
    return sub


def _lower(stage: Stage, copies: Optional[Mapping[str, str]]) -> MrvlSubgraph:
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


@contextmanager
def _batch_view(stage: Stage, batch: int, device: int) -> Iterator[None]:
    """The stage's activations with axis 0 ``device`` instead of ``batch`` while in the block."""
    saved = {}
    for node in stage.nodes:
        for tensor in all_inputs(node) + list(node.outputs):
            shape = None if is_const(tensor) else static_shape(tensor)
            if shape and shape[0] == batch and id(tensor) not in saved:
                saved[id(tensor)] = (tensor, tensor.shape)
                tensor.shape = [device] + shape[1:]
    try:
        yield
    finally:
        for tensor, shape in saved.values():
            tensor.shape = shape
