"""Cross-layer weight equalization (CLE, Nagel et al. 2019, "Data-Free Quantization Through
Weight Equalization and Bias Correction"), on a float model about to be quantized.

Marvell's int8 format has one scale per weight tensor (per-tensor symmetric, no zero point):
a convolution whose output channels have very different weight ranges (depthwise ones after BN
folding, typically) loses the small channels to the one step the largest sets. For a pair
``Conv1 -> [Relu] -> Conv2`` the range of Conv1's output channel c can be traded against
Conv2's input channel c without changing the function::

    W1'[c] = W1[c] / s[c]     b1'[c] = b1[c] / s[c]     W2'[:, c] = W2[:, c] * s[c]
    s[c] = sqrt(r1[c] / r2[c])  (r1: max |W1[c]|, r2: max |W2[:, c]|; both become sqrt(r1 r2))

It is exact in real arithmetic because ``Relu(x / s) = Relu(x) / s`` for every s > 0 (positive
homogeneity; LeakyRelu and PRelu alike, each branch being linear through 0), and a Conv2's zero
padding stays zero. It is NOT done across:

- ``Relu6`` / ``Clip``: ``min(max(x / s, 0), 6) != min(max(x, 0), 6) / s`` once x > 6 s; it
  would hold only with the bound scaled per channel to 6 / s, which Clip's one scalar bound
  (and Marvell's clamp, one bound per layer) cannot hold;
- ``HardSwish`` / ``HardSigmoid``: ``x * relu6(x + 3) / 6`` has the constant offset 3, so it is
  not homogeneous of any degree: scaling x by 1/s does not scale the output by any factor;
- a Conv1 (or its Relu) output read by anything but Conv2, or a model output: the other reader
  would see the scaled tensor.

In float32 the rewrite is not bit-exact: each rewritten weight and bias is the float64 product
rounded once to float32 (relative error at most 2^-24 each), so an output of the rewritten
model differs from the original by float32 rounding noise of the convolutions' dot products,
the bound ``tests/quantize/test_equalize.py`` checks on onnxruntime.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import numpy_helper

# Activations between the two convolutions that commute with positive per-channel scaling:
# piecewise linear through 0 with a breakpoint at 0 (PRelu's slope is per channel, unscaled).
HOMOGENEOUS = ("Relu", "LeakyRelu", "PRelu")
# Passes over the pairs: a Conv in the middle of a chain is scaled by both its pairs, so the
# scales are re-balanced until they settle (Nagel et al. iterate the same way).
PASSES = 20
SETTLED = 1e-3


@dataclass
class _Pair:
    first: onnx.NodeProto
    second: onnx.NodeProto


def equalize(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every exact Conv pair (module docstring) equalized; the rest as
    is. Run after BatchNormalization is folded, so the ranges are those quantized."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    pairs = equalizable_pairs(out.graph)
    if not pairs:
        return out
    weights, replaced = _own_weights(out.graph, pairs)
    for _ in range(PASSES):
        moved = max(_balance(pair, weights) for pair in pairs)
        if moved < SETTLED:
            break
    _store(out.graph, weights, replaced)
    return out


def equalizable_pairs(graph: onnx.GraphProto) -> List[_Pair]:
    """The ``Conv -> [Relu | LeakyRelu | PRelu] -> Conv`` pairs the rewrite is exact for
    (module docstring)."""
    inits = {t.name for t in graph.initializer}
    readers: Dict[str, List[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    pairs = []
    for node in graph.node:
        if not _plain_conv(node, inits):
            continue
        nxt = _only_reader(node.output[0], readers, outputs)
        if nxt is not None and nxt.op_type in HOMOGENEOUS and nxt.domain in ("", "ai.onnx"):
            nxt = _only_reader(nxt.output[0], readers, outputs)
        if nxt is not None and _plain_conv(nxt, inits) and nxt.input[0] != nxt.input[1]:
            pairs.append(_Pair(node, nxt))
    return pairs


def _plain_conv(node: onnx.NodeProto, inits: set) -> bool:
    """An ONNX Conv with a constant weight and (if any) constant bias."""
    return (node.op_type == "Conv" and node.domain in ("", "ai.onnx") and len(node.input) >= 2
            and all(name in inits for name in node.input[1:] if name))


def _only_reader(tensor: str, readers: Dict[str, List[onnx.NodeProto]], outputs: set
                 ) -> Optional[onnx.NodeProto]:
    found = readers.get(tensor, [])
    if tensor in outputs or len(found) != 1 or list(found[0].input).count(tensor) != 1:
        return None
    return found[0] if found[0].input[0] == tensor else None


def _own_weights(graph: onnx.GraphProto, pairs: List[_Pair]
                 ) -> Tuple[Dict[str, np.ndarray], set]:
    """Float64 copies of the pairs' weights and biases, each Conv given tensors of its own
    (renamed ``<name>_cle``) so that a tensor another node shares is left as it was."""
    arrays = {t.name: t for t in graph.initializer}
    weights: Dict[str, np.ndarray] = {}
    replaced = set()
    for conv in {id(c): c for p in pairs for c in (p.first, p.second)}.values():
        if arrays[conv.input[1]].data_type != onnx.TensorProto.FLOAT:
            continue
        for k in range(1, len(conv.input)):
            if conv.input[k]:
                own = f"{conv.name or conv.output[0]}_cle_{k}"
                weights[own] = numpy_helper.to_array(arrays[conv.input[k]]).astype(np.float64)
                replaced.add(conv.input[k])
                conv.input[k] = own
    return weights, replaced


def _groups(conv: onnx.NodeProto) -> int:
    return next((a.i for a in conv.attribute if a.name == "group"), 1)


def _balance(pair: _Pair, weights: Dict[str, np.ndarray]) -> float:
    """Equalize one pair in place; how far the scales were from 1 (max |log s|)."""
    if pair.first.input[1] not in weights or pair.second.input[1] not in weights:
        return 0.0
    w1, w2 = weights[pair.first.input[1]], weights[pair.second.input[1]]
    groups = _groups(pair.second)
    channels = w1.shape[0]
    if w2.shape[1] * groups != channels:
        return 0.0
    r1 = np.abs(w1.reshape(channels, -1)).max(axis=1)
    r2 = _in_ranges(w2, groups)
    usable = (r1 > 0) & (r2 > 0)
    scale = np.ones(channels)
    scale[usable] = np.sqrt(r1[usable] / r2[usable])
    weights[pair.first.input[1]] = w1 / scale.reshape([-1] + [1] * (w1.ndim - 1))
    if len(pair.first.input) > 2 and pair.first.input[2]:
        weights[pair.first.input[2]] = weights[pair.first.input[2]] / scale
    weights[pair.second.input[1]] = _scale_in(w2, scale, groups)
    return float(np.abs(np.log(scale)).max())


def _grouped(w2: np.ndarray, groups: int) -> Tuple[np.ndarray, Tuple[int, ...]]:
    """Conv2's weight as [groups, out per group, in per group, ...]: input channel c is
    ``[c // in_per_group, :, c % in_per_group]``."""
    shape = (groups, w2.shape[0] // groups) + w2.shape[1:]
    return w2.reshape(shape), shape


def _in_ranges(w2: np.ndarray, groups: int) -> np.ndarray:
    grouped, shape = _grouped(w2, groups)
    per = np.abs(grouped).max(axis=tuple(k for k in range(len(shape)) if k not in (0, 2)))
    return per.reshape(-1)


def _scale_in(w2: np.ndarray, scale: np.ndarray, groups: int) -> np.ndarray:
    grouped, shape = _grouped(w2, groups)
    factor = scale.reshape((groups, 1, shape[2]) + (1,) * (len(shape) - 3))
    return (grouped * factor).reshape(w2.shape)


def _store(graph: onnx.GraphProto, weights: Dict[str, np.ndarray], replaced: set) -> None:
    """The rewritten tensors, rounded once to float32; the tensors they replace dropped if
    nothing reads them any more (a graph input of that name stays)."""
    graph.initializer.extend(numpy_helper.from_array(a.astype(np.float32), name)
                             for name, a in weights.items())
    used = {name for node in graph.node for name in node.input}
    used |= {i.name for i in graph.input}
    for tensor in [t for t in graph.initializer if t.name in replaced - used]:
        graph.initializer.remove(tensor)


__all__ = ["HOMOGENEOUS", "equalizable_pairs", "equalize"]
