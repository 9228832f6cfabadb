"""PRelu with a constant slope decomposed before quantizing: ``Relu(x) + Min(x, 0) * slope``.

Why: quantize_static leaves a PRelu's slope in float32 and quantizes only its input and output,
so the QDQ model computes ``x * slope`` in float32 per channel between one DequantizeLinear and
one QuantizeLinear. No int8 layer of the newer Marvell codegen computes that: its LUT is one
table for every channel, and Mul2D multiplies int8 values by an int8 constant, which a float
slope is not. Decomposed, each step has an exact int8 form, and quantize_static quantizes the
slope as the constant of a Mul: ``Relu`` and ``Min`` against 0 are clamps of the int8 values
(``layers/qnn/unary.py``), the product a Mul2D by the int8 slope, the sum a Sum2D (the
``_decompose.py`` float lowering of PRelu is the same decomposition, with Relu(-x)).

The rewrite is exact in float32 (x < 0: 0 + x * slope; x >= 0: x + 0 * slope = x); the int8
model differs from quantizing the PRelu itself by the quantization of the slope (per tensor, as
a constant operand) and of the two intermediate tensors, which the QDQ model then states
itself. Nodes keep the PRelu's name on the final Add and its output tensor, so report.json,
``--keep-fp16`` and the quantization analysis still find it.
"""
from __future__ import annotations

from typing import AbstractSet, Dict

import numpy as np
import onnx
from onnx import helper, numpy_helper


def decompose_prelu(model: onnx.ModelProto, keep: AbstractSet[str] = frozenset()
                    ) -> onnx.ModelProto:
    """A copy of ``model`` with every PRelu whose slope is a float initializer decomposed, but
    those named in ``keep`` (nodes left in float: ``--keep-fp16``)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits: Dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
    nodes = []
    for node in graph.node:
        if node.name not in keep and _decomposable(node, inits):
            nodes.extend(_decomposition(node, graph))
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return out


def _decomposable(node: onnx.NodeProto, inits: Dict[str, onnx.TensorProto]) -> bool:
    return (node.op_type == "PRelu" and node.domain in ("", "ai.onnx") and len(node.input) == 2
            and node.input[1] in inits
            and inits[node.input[1]].data_type == onnx.TensorProto.FLOAT)


def _decomposition(node: onnx.NodeProto, graph: onnx.GraphProto):
    base = node.name or node.output[0]
    x, slope = node.input
    zero = f"{base}_zero"
    graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), zero))
    return [helper.make_node("Relu", [x], [f"{base}_pos"], name=f"{base}_relu"),
            helper.make_node("Min", [x, zero], [f"{base}_neg"], name=f"{base}_min"),
            helper.make_node("Mul", [f"{base}_neg", slope], [f"{base}_scaled"],
                             name=f"{base}_slope"),
            helper.make_node("Add", [f"{base}_pos", f"{base}_scaled"], list(node.output),
                             name=node.name or f"{base}_add")]


__all__ = ["decompose_prelu"]
