"""Multiply-accumulates per node: how much work a node is, for ranking and summarising regions.

Counts the products of Conv, ConvTranspose, Gemm and MatMul, the layers that dominate a CNN; every
other op counts 0. A small, replaceable estimate: ``partition`` (``max_subgraphs``) and the
report's fragmentation summary call only ``node_macs``.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, static_shape

MAC_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})  # what node_macs counts


def node_macs(node: gs.Node) -> int:
    """Multiply-accumulates of one node with static shapes (0 when a shape is unknown)."""
    out = static_shape(node.outputs[0]) if node.outputs else None
    src = static_shape(node.inputs[0]) if node.inputs else None
    if out is None or src is None:
        return 0
    if node.op == "Conv" and len(node.inputs) > 1:
        weight = static_shape(node.inputs[1])
        return int(np.prod(out)) * int(np.prod(weight[1:])) if weight else 0
    if node.op == "ConvTranspose" and len(node.inputs) > 1:
        weight = static_shape(node.inputs[1])  # [C_in, C_out / groups, kh, kw]
        return int(np.prod(src)) * int(np.prod(weight[1:])) if weight else 0
    if node.op == "Gemm":
        depth = src[0] if int(attr(node, "transA", 0)) else src[-1]
        return int(np.prod(out)) * int(depth)
    if node.op == "MatMul":
        return int(np.prod(out)) * int(src[-1])
    return 0


def total_macs(nodes: Iterable[gs.Node]) -> int:
    return sum(node_macs(n) for n in nodes)
