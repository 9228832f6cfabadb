"""BatchNormalizations no Conv precedes, kept in float when quantizing.

``fold_bn`` folds a BatchNormalization into the Conv or ConvTranspose before it; one after a
MaxPool, a Relu or a graph input has no such Conv. quantize_static would quantize its scale and
shift as int8 weights (DequantizeLinear of a constant), which no int8 layer takes, and the
per-channel affine layer (``mrvl.channel_affine``, a depthwise 1x1 Conv2D) needs constant
ones: each such BN cut its model (vietcombank_captcha, openwakeword's embedding model).

Requires: a float model with BatchNormalization already folded where it can be. Ensures:
every BatchNormalization left has a non-empty unique name, and ``lone_batchnorms`` returns the
names, for ``quantize_static``'s ``nodes_to_exclude``: the BN is left in float between its
input's DequantizeLinear and its output's QuantizeLinear, and converts as in fp16 (the
channel affine, in the int8 region). Exact: only names change; the BN computes what it did.
"""
from __future__ import annotations

from typing import List

import onnx

REASON = ("a BatchNormalization no Conv precedes (nothing to fold it into) is kept in fp16: "
          "the int8 layers take no BatchNormalization, the channel affine needs its scale "
          "constant")


def lone_batchnorms(model: onnx.ModelProto) -> List[str]:
    """The names of ``model``'s BatchNormalization nodes, an unnamed one named (in place)
    after its output, made unique."""
    taken = {node.name for node in model.graph.node if node.name}
    names = []
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        if not node.name:
            node.name = _unique(f"BatchNormalization_{node.output[0]}", taken)
            taken.add(node.name)
        names.append(node.name)
    return names


def _unique(base: str, taken: "set[str]") -> str:
    name, suffix = base, 1
    while name in taken:
        name, suffix = f"{base}_{suffix}", suffix + 1
    return name
