"""The fp16 floor's folds: a Conv and the BatchNormalization that alone reads it become one
Conv, as every fp16 device computes them, before ``fp16_floor`` rounds every tensor.

The converter lowers ``Conv -> BatchNormalization`` as one Conv2D layer (``layers/conv2d.py``:
scale = gamma / sqrt(var + eps) in float64, W' = float32(W * scale), b' = float32((b - mean) *
scale + beta)) whose weights the device holds in fp16 and whose output it rounds once. Rounding
the model's own W, gamma, beta, mean and var and the Conv's output instead is a form no device
computes, and can cost far less: slanet-plus (73 pairs) has an unfolded floor of 0.0065 and 0.021
of its outputs' peaks, a folded floor of 0.013 and 0.035, an artifact at 0.022 and 0.044 whose
every layer agrees with the model to 6e-6 when nothing is rounded.

Bound: the fold is exact in real arithmetic; in fp32 the folded Conv and the pair differ by a
few float32 ulps of the largest term, |Conv output| * scale (the float32 rounding of W' and b',
and where the BatchNormalization re-centres an output far from zero, the pair's own fp32
subtraction); the fuzz test holds it to 1e-6 of that term (onnxruntime's ConvBNFusion folds
the same way), orders of magnitude below the fp16 step the floor measures.

- requires: a model copy (changed in place); weights as initializers or Constant nodes;
- ensures: each Conv whose output only one BatchNormalization reads (not a graph output), all
  their weights constant and float32, the Conv's bias absent or constant, and every scale
  finite, is replaced by one Conv writing the BatchNormalization's output from new
  initializers W', b'; the BatchNormalization is removed. Anything else is left as it is.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import numpy as np
import onnx
from onnx import helper, numpy_helper


def fold_conv_batchnorms(copy: onnx.ModelProto) -> int:
    """Fold every such pair of ``copy`` (module docstring); how many were folded."""
    graph = copy.graph
    values = _constants(graph)
    readers: Dict[str, List[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    taken = {t.name for t in graph.initializer}
    folded: List[onnx.NodeProto] = []
    for conv in graph.node:
        if conv.op_type != "Conv" or conv.output[0] in outputs:
            continue
        after = readers.get(conv.output[0], [])
        if len(after) == 1 and after[0].op_type == "BatchNormalization" and \
                after[0].input[0] == conv.output[0] and _fold(graph, conv, after[0], values, taken):
            folded.append(after[0])
    for bn in folded:
        graph.node.remove(bn)
    return len(folded)


def _constants(graph: onnx.GraphProto) -> Dict[str, np.ndarray]:
    """Every float32 constant of ``graph`` by name: initializers and Constant nodes' values."""
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        if node.op_type == "Constant" and value is not None:
            values[node.output[0]] = numpy_helper.to_array(value)
    return {k: v for k, v in values.items() if v.dtype == np.float32}


def _fold(graph: onnx.GraphProto, conv: onnx.NodeProto, bn: onnx.NodeProto,
          values: Dict[str, np.ndarray], taken: Set[str]) -> bool:
    """Rewrite ``conv`` to compute ``bn``'s output with folded weights; False (nothing changed)
    when an operand is not a float32 constant or a scale is not finite."""
    operands = [conv.input[1], *bn.input[1:5]]
    if len(bn.input) < 5 or any(name not in values for name in operands):
        return False
    gamma, beta, mean, var = (values[bn.input[i]].astype(np.float64) for i in (1, 2, 3, 4))
    epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    scale = gamma / np.sqrt(var + epsilon)
    weights = values[conv.input[1]]
    bias = _bias(conv, values, weights.shape[0])
    if bias is None or not np.all(np.isfinite(scale)):
        return False
    # float64 products rounded to float32 once, as layers/conv2d.py computes them
    folded_w = (weights.astype(np.float64) * scale.reshape(-1, *[1] * (weights.ndim - 1))
                ).astype(np.float32)
    folded_b = ((bias - mean) * scale + beta).astype(np.float32)
    names = [_fresh(taken, f"{bn.output[0]}__folded_{what}") for what in ("w", "b")]
    graph.initializer.extend([numpy_helper.from_array(folded_w, names[0]),
                              numpy_helper.from_array(folded_b, names[1])])
    # the Conv keeps its attributes and writes the BatchNormalization's output
    conv.CopyFrom(helper.make_node("Conv", [conv.input[0], *names], [bn.output[0]],
                                   name=conv.name, **{a.name: helper.get_attribute_value(a)
                                                      for a in conv.attribute}))
    return True


def _bias(conv: onnx.NodeProto, values: Dict[str, np.ndarray], channels: int
          ) -> Optional[np.ndarray]:
    """The Conv's bias in float64 (zeros when it has none); None when it is not a constant."""
    if len(conv.input) < 3 or not conv.input[2]:
        return np.zeros(channels)
    value = values.get(conv.input[2])
    return None if value is None else value.astype(np.float64)


def _fresh(taken: Set[str], base: str) -> str:
    """``base``, or ``base_2``... the first name not ``taken`` (which then holds it)."""
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
