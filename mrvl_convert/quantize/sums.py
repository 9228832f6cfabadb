"""A Sum of two inputs written as an Add before quantizing.

Why: quantize_static quantizes an Add (DequantizeLinear -> Add -> QuantizeLinear, an int8 Sum2D
of the newer codegen, exact against onnxruntime) but not a Sum, which it leaves in float32 with
whatever follows it up to the next quantized op: the converter must then run it as an fp16
layer between quant layers, a step off onnxruntime's QDQ run wherever a value lies within fp16
rounding of a rounding boundary (ShuffleNet's residual Sum -> Relu). Sum and Add of two inputs
are one operation (the same float32 addition, the same multidirectional broadcasting), so the
rewrite changes no value of the float model. The node keeps its name and output tensor, so
report.json, ``--keep-fp16`` and the quantization analysis still find it; a Sum of one or of
three and more inputs stays as it is.
"""
from __future__ import annotations

from typing import AbstractSet

import onnx


def sums_as_add(model: onnx.ModelProto, keep: AbstractSet[str] = frozenset()) -> onnx.ModelProto:
    """A copy of ``model`` whose every Sum of two inputs in the default domain is an Add, but
    those named in ``keep`` (nodes left in float: ``--keep-fp16``)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.op_type == "Sum" and node.domain in ("", "ai.onnx") and len(node.input) == 2 \
                and node.name not in keep:
            node.op_type = "Add"
    return out
