"""Per-tensor QuantizeLinear / DequantizeLinear nodes as per-element steps of a QDQ model.

quantize_static writes a QDQ pair after every op it quantizes, so in an int8 model a chain
that only moves elements (a SpaceToBatch's Pad, Transpose, SpaceToDepth, Reshape) carries a
pair after most of its nodes. A QuantizeLinear or DequantizeLinear of one scale and one zero
point is the same function of every element, so it commutes with a move: a pass that
recognises a chain by what it moves (``space_to_batch.py``) may look through such nodes and
apply them again, in their order, on the moved tensor. A Pad's zero stays zero through them
(``round(0 / s) + z = z``, ``(z - z) s = 0``).

Requires: constant scale and zero point inputs.
Ensures: ``without_round_trips`` drops, from a sequence of per-tensor Q/DQ nodes
(``core.qdq_grid.per_tensor_qdq``) and other per-element ops, each DequantizeLinear directly
followed by a QuantizeLinear of the same grid (``core.qdq_grid.grid``: scale, zero point and
integer type), both with an explicit zero point (the pair of the two): the QuantizeLinear
gives back the integer the DequantizeLinear read. Exact: ``(q - z) s`` in float32 divided by
``s`` is within a few ulps of the integer ``q - z`` (``|q - z| <= 255``), which rounds back to
it, inside the type's range.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import present
from mrvl_convert.core.qdq_grid import Grid, grid


def _parameters(node: gs.Node) -> Optional[Grid]:
    """``grid`` of a per-tensor Q/DQ with an explicit zero point."""
    return grid(node) if present(node, 2) is not None else None


def round_trip(first: gs.Node, second: gs.Node) -> bool:
    """``first`` a DequantizeLinear and ``second`` a QuantizeLinear of the same parameters."""
    if first.op != "DequantizeLinear" or second.op != "QuantizeLinear":
        return False
    params = _parameters(first)
    return params is not None and params == _parameters(second)


def without_round_trips(nodes: Sequence[gs.Node]) -> List[gs.Node]:
    """``nodes`` (per-element steps in their order) without each DequantizeLinear that a
    QuantizeLinear of the same parameters directly follows, nor that QuantizeLinear."""
    kept: List[gs.Node] = []
    for node in nodes:
        if kept and round_trip(kept[-1], node):
            kept.pop()
        else:
            kept.append(node)
    return kept
