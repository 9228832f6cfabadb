"""A BatchNormalization that another quantizer left between two QDQ pairs after a Conv
(``DQ -> Conv -> Q -> DQ -> BatchNormalization -> Q``, its scale, shift, mean and variance
dequantized constants or float ones), folded into the Conv for ``foreign_int8.py``'s requantize
mode. Marvell's recipe folds it before quantizing (``quantize/fold_bn.py``); the device has no
int8 per-channel affine, so left alone it stays on CPU, one cut per BatchNormalization.

Contract.
  Requires: a ``QdqGraph`` of the model, before ``foreign_int8``'s requantization (which then
  requantizes the folded weight per tensor and re-scales the bias to the new product scale).
  Ensures: the Conv's weight and bias DequantizeLinears dequantize ``W k`` and
  ``(b - mean) k + beta``, ``k = scale / sqrt(var + eps)`` per output channel, as float32
  values carried at scale 1 in float form until requantized (weight: the float weight
  requantized per tensor, ``foreign_int8``'s bound; bias: int32 at the product scale); the
  Conv writes the BatchNormalization's output; the pair between them and the
  BatchNormalization are gone (where the BatchNormalization is read by a Relu and that by a
  QuantizeLinear, as onnxruntime before 1.19 writes it, the pair stays at the Relu's output
  scale and feeds the Relu).
  Bound: not exact against the given model: the rounding the removed pair did on the Conv's
  output (half its step) is gone, and the folded weight is requantized (half its new step);
  what that costs is in the measured cost.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import onnx

from mrvl_convert.frontend.qdq_graph import QdqGraph, dequantized

_BN_EPSILON = 1e-5
FOLDED_WEIGHT = "_bn_folded_1"   # the name a folded weight's DequantizeLinear ends with


def fold_batchnorms(graph: QdqGraph) -> int:
    """Fold every foldable BatchNormalization (module docstring); returns how many."""
    folded = 0
    for node in list(graph.g.node):
        if node.op_type == "BatchNormalization" and id(node) not in graph.dropped:
            folded += _fold(graph, node)
    return folded


def _value(graph: QdqGraph, name: str) -> Optional[np.ndarray]:
    """A constant input, or the float value of a DequantizeLinear of a constant."""
    value = graph.const(name)
    if value is not None:
        return value.astype(np.float32) if value.dtype.kind == "f" else None
    node = graph.producer.get(name)
    source = graph.const(node.input[0]) if node is not None and node.op_type == "DequantizeLinear" else None
    if source is None or graph.params(node) is None:
        return None
    return dequantized(graph, node, source)


def _chain(graph: QdqGraph, bn: onnx.NodeProto) -> Optional[Tuple[onnx.NodeProto, ...]]:
    """(conv, quantize, dequantize) before ``bn`` when each is read only by the next."""
    dq = graph.producer.get(bn.input[0])
    q = graph.producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
    conv = graph.producer.get(q.input[0]) if q is not None and q.op_type == "QuantizeLinear" else None
    if conv is None or conv.op_type != "Conv" or len(bn.output) != 1:
        return None
    for node in (conv, q, dq):
        if len(graph.readers.get(node.output[0], [])) != 1:
            return None
    return conv, q, dq


def _fold(graph: QdqGraph, bn: onnx.NodeProto) -> int:
    chain = _chain(graph, bn)
    params = [_value(graph, name) for name in bn.input[1:5]] if chain else [None]
    if chain is None or any(p is None for p in params):
        return 0
    conv, q, dq = chain
    weight = _value(graph, conv.input[1])
    bias = _value(graph, conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
    if weight is None or (len(conv.input) > 2 and conv.input[2] and bias is None):
        return 0
    scale, shift, mean, var = params
    eps = next((a.f for a in bn.attribute if a.name == "epsilon"), _BN_EPSILON)
    k = (scale / np.sqrt(var + np.float32(eps))).astype(np.float32)
    bias = np.zeros(weight.shape[0], np.float32) if bias is None else bias
    _set_float(graph, conv, 1, (weight * k.reshape(-1, *([1] * (weight.ndim - 1))))
               .astype(np.float32))
    _set_float(graph, conv, 2, ((bias - mean) * k + shift).astype(np.float32))
    relu_q = _relu_then_quantize(graph, bn)
    if relu_q is not None:  # BN -> Relu -> Q (onnxruntime < 1.19): the pair at the Relu's scale
        relu, out_q = relu_q
        relu.input[0] = dq.output[0]
        q.input[1:] = out_q.input[1:]
        dq.input[1:] = out_q.input[1:]
        graph.dropped.add(id(bn))
        return 1
    conv.output[0] = bn.output[0]
    graph.dropped.update({id(q), id(dq), id(bn)})
    return 1


def _relu_then_quantize(graph: QdqGraph, bn: onnx.NodeProto
                        ) -> Optional[Tuple[onnx.NodeProto, onnx.NodeProto]]:
    """(relu, quantize) where ``bn`` is read only by a Relu read only by a QuantizeLinear: the
    form onnxruntime before 1.19 writes (no pair between them). The Conv's own pair then takes
    the Relu's output scale and zero point: exact at the Relu's output, since a Relu after a
    clamp to the Relu's range is the clamp of the Relu."""
    readers = graph.readers.get(bn.output[0], [])
    relu = readers[0] if len(readers) == 1 and readers[0].op_type == "Relu" else None
    after = graph.readers.get(relu.output[0], []) if relu is not None else []
    if len(after) == 1 and after[0].op_type == "QuantizeLinear":
        return relu, after[0]
    return None


def _set_float(graph: QdqGraph, conv: onnx.NodeProto, index: int, value: np.ndarray) -> None:
    """Input ``index`` of ``conv``: a DequantizeLinear of ``value`` as a per-channel int32
    placeholder (scale 1 per channel, so that ``foreign_int8`` requantizes the weight and
    re-scales the bias), or a new one for a Conv without bias."""
    name = f"{conv.name}_bn_folded_{index}"
    scale = np.ones(value.shape[0], np.float32)
    wide = value.astype(np.float64)
    exact = np.float32(np.abs(wide).max(initial=0.0)) / 2**30 or np.float32(1.0)
    scale = scale * exact
    values = np.rint(wide / exact).astype(np.int32)
    node = onnx.helper.make_node(
        "DequantizeLinear", [graph.add_const(f"{name}_q", values),
                             graph.add_const(f"{name}_s", scale.astype(np.float32)),
                             graph.add_const(f"{name}_z", np.zeros(value.shape[0], np.int32))],
        [f"{name}_out"], name=name, axis=0)
    graph.inserted.setdefault(id(conv), []).append(node)
    graph.producer[node.output[0]] = node
    graph.readers[node.output[0]] = [conv]
    if index < len(conv.input):
        old = graph.producer.get(conv.input[index])
        if old is not None and graph.readers.get(conv.input[index]) == [conv]:
            graph.dropped.add(id(old))  # the given weight's or bias's DequantizeLinear
        conv.input[index] = node.output[0]
    else:
        conv.input.append(node.output[0])
