"""A Conv2D layer's weights rounded once to fp16 after its BatchNormalization fold, written
back into the float model's Conv and BatchNormalization (``fp16_analysis.py``'s weights-alone
figure for a folded layer).

The converter folds ``Conv -> BatchNormalization`` into one Conv2D layer (``layers/conv2d.py``:
scale = gamma / sqrt(var + eps) in float64, W' = float32(W * scale), b' = float32((b - mean) *
scale + beta)) and the artifact holds W' and b' rounded to fp16. Rounding W and the
BatchNormalization's parameters apart would not be that. Here the pair keeps its two nodes but
gets W'' = round16(W') / scale and b'' = (round16(b') - beta) / scale + mean, so that
onnxruntime's fp32 run of ``(x * W'' + b'' - mean) * scale + beta`` is ``x * round16(W') +
round16(b')``: exact up to the fp32 rounding of the division and of the products (a few fp32
ulps of each weight, orders of magnitude below the fp16 step being measured).

- requires: a model copy (changed in place) and the layer's op nodes that read float weights;
- ensures: True and the pair rewritten when they are exactly a Conv and the
  BatchNormalization reading its output, with initializer operands and no zero scale; False
  (nothing changed) otherwise.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional

import numpy as np
import onnx
from onnx import numpy_helper

from mrvl_convert.kernels.fp16 import round_to_fp16


def round_folded(copy: onnx.ModelProto, readers: List[str],
                 nodes: Optional[Mapping[str, onnx.NodeProto]] = None,
                 inits: Optional[Dict[str, onnx.TensorProto]] = None) -> bool:
    """Rewrite the Conv + BatchNormalization pair ``readers`` names (module docstring), or a
    BatchNormalization alone (``round_affine``). ``nodes`` and ``inits``: the graph's nodes and
    initializers by name when the caller keeps them (``kept_fp16``: one look-up per layer, not
    one scan); ``inits`` gets what is added."""
    nodes = {n.name: n for n in copy.graph.node} if nodes is None else nodes
    if len(readers) == 1 and getattr(nodes.get(readers[0]), "op_type", "") == \
            "BatchNormalization":
        return round_affine(copy, nodes[readers[0]], inits)
    pair = [nodes.get(name) for name in readers]
    if len(pair) != 2 or None in pair or [n.op_type for n in pair] != ["Conv",
                                                                         "BatchNormalization"]:
        return False
    conv, bn = pair
    inits = {t.name: t for t in copy.graph.initializer} if inits is None else inits
    if bn.input[0] != conv.output[0] or any(i not in inits for i in [conv.input[1],
                                                                     *bn.input[1:5]]):
        return False
    gamma, beta, mean, var = (_array(inits[bn.input[i]]) for i in (1, 2, 3, 4))
    epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    scale = gamma / np.sqrt(var + epsilon)
    if not np.all(np.isfinite(scale)) or np.any(scale == 0):
        return False
    weights = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float32)
    bias = _bias(conv, inits, weights.shape[0])
    if bias is None:
        return False
    folded_w = round_to_fp16((weights * scale[:, None, None, None]).astype(np.float32))[0]
    folded_b = round_to_fp16(((bias - mean) * scale + beta).astype(np.float32))[0]
    _set(copy, inits, conv.input[1], folded_w / scale[:, None, None, None])
    bias_name = conv.input[2] if len(conv.input) > 2 and conv.input[2] else \
        _new_name(conv.name + "_fp16_bias", inits)
    _set(copy, inits, bias_name, (folded_b - beta) / scale + mean)
    if len(conv.input) < 3:
        conv.input.append(bias_name)
    elif not conv.input[2]:
        conv.input[2] = bias_name
    return True


def round_affine(copy: onnx.ModelProto, bn: onnx.NodeProto,
                 inits: Optional[Dict[str, onnx.TensorProto]] = None) -> bool:
    """A BatchNormalization no Conv precedes, which the converter lowers as a per-channel
    affine (``layers/conv2d.py _lower_affine``: scale = gamma / sqrt(var + eps), shift =
    beta - mean * scale in float64, each rounded to float32 then fp16 in the artifact), made
    to compute ``x * round16(scale) + round16(shift)``: gamma and beta become those, mean 0,
    var 1 and epsilon 0 (sqrt(1) and the division by it are exact). New initializers, so a
    shared parameter is left as it is. False (nothing changed) for non-constant operands."""
    inits = {t.name: t for t in copy.graph.initializer} if inits is None else inits
    if len(bn.input) < 5 or any(i not in inits for i in bn.input[1:5]):
        return False
    gamma, beta, mean, var = (_array(inits[bn.input[i]]) for i in (1, 2, 3, 4))
    epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    scale = gamma / np.sqrt(var + epsilon)
    values = (round_to_fp16(scale.astype(np.float32))[0],
              round_to_fp16((beta - mean * scale).astype(np.float32))[0],
              np.zeros_like(scale), np.ones_like(scale))
    for k, value in enumerate(values, start=1):
        name = _new_name(f"{bn.name}_fp16_affine_{k}", inits)
        _set(copy, inits, name, value)
        bn.input[k] = name
    for attribute in bn.attribute:
        if attribute.name == "epsilon":
            attribute.f = 0.0
            break
    else:
        bn.attribute.append(onnx.helper.make_attribute("epsilon", 0.0))
    return True


def _array(tensor: onnx.TensorProto) -> np.ndarray:
    return numpy_helper.to_array(tensor).astype(np.float64)


def _bias(conv: onnx.NodeProto, inits: Dict[str, onnx.TensorProto], channels: int
          ) -> Optional[np.ndarray]:
    """The Conv's bias as the lowering takes it (float32, then float64 in the fold); None when
    it is not an initializer."""
    if len(conv.input) < 3 or not conv.input[2]:
        return np.zeros(channels)
    if conv.input[2] not in inits:
        return None
    return numpy_helper.to_array(inits[conv.input[2]]).astype(np.float32).astype(np.float64)


def _set(copy: onnx.ModelProto, inits: Dict[str, onnx.TensorProto], name: str,
         value: np.ndarray) -> None:
    tensor = numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)
    if name in inits:
        inits[name].CopyFrom(tensor)
    else:
        copy.graph.initializer.append(tensor)
        inits[name] = copy.graph.initializer[-1]


def _new_name(base: str, taken: Dict[str, onnx.TensorProto]) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name
