"""Multiply-accumulates per node: how much work a node is, for ranking and summarising regions.

Counts the products of Conv, ConvTranspose, Gemm and MatMul, the layers that dominate a CNN,
and of the forms that compute the same products elsewhere, on the CPU: onnxruntime's integer
ConvInteger/MatMulInteger (``quantize_dynamic``) and the recurrent cells (LSTM, GRU, RNN,
DynamicQuantizeLSTM: gates x hidden x (input + hidden) per step and direction). Uncounted, a
model whose 21 ConvIntegers stay on the CPU read "100% of the MACs on the accelerator" (ddddocr's
common_old). Every other op counts 0. A small, replaceable estimate: ``partition``
(``max_subgraphs``) and the report's fragmentation summary call only ``node_macs``.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, static_shape

MAC_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})  # the float layers counted
_GATES = {"LSTM": 4, "DynamicQuantizeLSTM": 4, "GRU": 3, "RNN": 1}  # per hidden unit


def node_macs(node: gs.Node) -> int:
    """Multiply-accumulates of one node with static shapes (0 when a shape is unknown)."""
    out = static_shape(node.outputs[0]) if node.outputs else None
    src = static_shape(node.inputs[0]) if node.inputs else None
    if out is None or src is None:
        return 0
    if node.op in _GATES:
        return _recurrent_macs(node, src)
    if node.op in ("Conv", "ConvInteger") and len(node.inputs) > 1:
        weight = static_shape(node.inputs[1])
        return int(math.prod(out)) * int(math.prod(weight[1:])) if weight else 0
    if node.op == "ConvTranspose" and len(node.inputs) > 1:
        weight = static_shape(node.inputs[1])  # [C_in, C_out / groups, kh, kw]
        return int(math.prod(src)) * int(math.prod(weight[1:])) if weight else 0
    if node.op == "Gemm":
        depth = src[0] if int(attr(node, "transA", 0)) else src[-1]
        return int(math.prod(out)) * int(depth)
    if node.op in ("MatMul", "MatMulInteger"):
        return int(math.prod(out)) * int(src[-1])
    return 0


def _recurrent_macs(node: gs.Node, src: Any) -> int:
    """Steps x batch x directions x gates x hidden x (input + hidden) (X is
    ``[seq, batch, input]``, ``[batch, seq, input]`` with layout 1)."""
    hidden = int(attr(node, "hidden_size", 0))
    if len(src) != 3 or not hidden:
        return 0
    directions = 2 if attr(node, "direction", "forward") == "bidirectional" else 1
    steps_batch, width = int(src[0]) * int(src[1]), int(src[2])
    return steps_batch * directions * _GATES[node.op] * hidden * (width + hidden)


def total_macs(nodes: Iterable[gs.Node]) -> int:
    return sum(node_macs(n) for n in nodes)
