"""Each Conv, ConvTranspose or Gemm its own bias before quantizing.

Why: quantize_static quantizes a bias per reader (its scale is the reader's input scale times
its weight scale), so a bias initializer that two such nodes read is copied for the second
(``QDQQuantizer._dup_initializer``), named the bias name followed by the largest integer suffix
of the initializers so named plus one. It checks the initializers' names only: where that name
is already an activation's (tf2onnx names a Conv's bias ``...conv1d_25`` and writes an
activation ``...conv1d_252`` beside it, basic-pitch's nmp), the copy shadows the activation, its
readers read the bias, and the QDQ model is wrong (nmp: a Neg of the activation became a Neg of
a ``[36]`` constant, and shape inference failed). Here each reader after the first gets its own
copy, named apart from every tensor of the graph, so quantize_static finds no bias read twice.

Requires: an ONNX model (initializers as biases; a bias computed by a node is left alone).
Ensures: exact (each copy holds the same values; every node computes what it did); the first
reader keeps the bias's name, so report.json and the analysis still find it; nodes named in
``keep`` (left in float: quantize_static does not quantize their biases) keep theirs.
"""
from __future__ import annotations

from typing import AbstractSet, Dict, Set

import onnx

_BIASED = ("Conv", "ConvTranspose", "Gemm")  # the ops quantize_static quantizes a bias of


def own_biases(model: onnx.ModelProto, keep: AbstractSet[str] = frozenset()) -> onnx.ModelProto:
    """A copy of ``model`` in which no two quantized Conv/ConvTranspose/Gemm share a bias
    initializer (module docstring)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    initializers = {t.name: t for t in graph.initializer}
    taken: Set[str] = _names(graph)
    seen: Dict[str, int] = {}
    for node in graph.node:
        if node.op_type not in _BIASED or node.domain not in ("", "ai.onnx") \
                or node.name in keep or len(node.input) < 3 or node.input[2] not in initializers:
            continue
        bias = node.input[2]
        seen[bias] = seen.get(bias, 0) + 1
        if seen[bias] == 1:
            continue
        copy = onnx.TensorProto()
        copy.CopyFrom(initializers[bias])
        copy.name = _fresh(f"{bias}_own", taken)
        graph.initializer.append(copy)
        node.input[2] = copy.name
    return out


def _names(graph: onnx.GraphProto) -> Set[str]:
    """Every tensor name of the graph (a copy's name must be none of them)."""
    names = {t.name for t in graph.initializer} | {v.name for v in graph.input} | \
        {v.name for v in graph.output} | {v.name for v in graph.value_info}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


def _fresh(base: str, taken: Set[str]) -> str:
    k = 1
    while f"{base}{k}" in taken:
        k += 1
    taken.add(f"{base}{k}")
    return f"{base}{k}"
