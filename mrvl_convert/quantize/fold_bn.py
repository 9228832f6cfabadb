"""BatchNormalization folded into the Conv or ConvTranspose before it, on a float model about to
be quantized.

quantize_static quantizes a ``Conv -> BatchNormalization`` as two int8 layers, and the Marvell int8
format has no BatchNormalization layer, so every such pair would leave the accelerator. Marvell's
codegen folds BN into the convolution before quantizing (mrvl.py ``MrvlOptimizeBatchnormPass``,
then ``FakeQuantizationToInteger``); onnxruntime's ``quant_pre_process`` does the same with its
graph optimizer. Here the folding is the library's own, applied to the float model so that the
QDQ model onnxruntime runs (the reference) and the one converted are the same model.

The rewrite, per output channel o with s = gamma / sqrt(var + eps) computed in float64::

    W'[o] = float32(W[o] * s[o])        b'[o] = float32((b[o] - mean[o]) * s[o] + beta[o])

It is not bit-exact: onnxruntime computes the unfolded model as float32(conv) then BN in float32.
Each folded weight is the exact product rounded once (relative 2^-24), so an output element of
the folded model differs from the unfolded one by at most ``(K + 4) * 2^-23 * sum |W'| |x|``
over its window (K: the window's fan-in), the usual float32 dot-product bound taken for both
computations (``tests/system/test_int8_corpus.py`` checks it on onnxruntime).

A ConvTranspose (weight ``[C_in, C_out / group, kH, kW]``) is scaled along its output channels
the same way; Paddle writes its bias as a separate ``Add`` of a per-channel constant between it
and the BN (``ConvTranspose -> Add(b) -> BatchNormalization``), which folds into b' as the Conv's
own bias does. The unfolded model rounds once more (the Add), so the bound there is
``(K + 5) * 2^-23 * (sum |W'| |x| + |b'|)`` plus the output's own rounding, K the number of
products summed into the element (``tests/quantize/test_fold_bn_transpose.py``).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import AbstractSet, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import onnx
from onnx import numpy_helper


def _unchanged(model: onnx.ModelProto) -> onnx.ModelProto:
    return model


@contextlib.contextmanager
def without_batchnorm(path: str, model: onnx.ModelProto,
                      then: Callable[[onnx.ModelProto], onnx.ModelProto] = _unchanged
                      ) -> Iterator[str]:
    """The file to hand quantize_static for the model at ``path`` (loaded as ``model`` without
    its external data): the folded model, rewritten further by ``then``, in a temporary file
    removed afterwards (onnxruntime 1.18's quantize_static cannot take a ModelProto), or the
    path itself for a model whose weights live in external files (left as it is:
    quantize_static reads those next to it)."""
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        yield str(path)
        return
    with tempfile.TemporaryDirectory(prefix="mrvl_fold_bn_") as folder:
        folded = os.path.join(folder, os.path.basename(str(path)))
        onnx.save(then(fold_batchnorm(model)), folded)
        yield folded


def fold_batchnorm(model: onnx.ModelProto, keep: AbstractSet[str] = frozenset()
                   ) -> onnx.ModelProto:
    """A copy of ``model`` with every ``Conv -> BatchNormalization`` (constant weights and
    statistics, the Conv's output read only by the BN) folded into one Conv, but the
    BatchNormalizations named in ``keep``; the rest as is."""
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    graph = folded.graph
    inits = {t.name: t for t in graph.initializer}
    consumers = _consumers(graph)
    outputs = {o.name for o in graph.output}
    producers = {out: node for node in graph.node for out in node.output}
    drop: List[onnx.NodeProto] = []
    for bn in graph.node:
        conv = producers.get(bn.input[0]) if bn.op_type == "BatchNormalization" else None
        conv, add = _bias_add(conv, producers, inits, consumers, outputs)
        if conv is None or bn.name in keep or not _foldable(conv, bn, inits, consumers, outputs):
            continue
        _fold(conv, bn, inits, graph, add)
        conv.output[0] = bn.output[0]
        drop.extend([bn] if add is None else [add, bn])
    for bn in drop:
        graph.node.remove(bn)
    used = {name for node in graph.node for name in node.input}
    stale = [t for t in graph.initializer if t.name not in used]
    for tensor in stale if drop else []:
        graph.initializer.remove(tensor)
    return folded


def _consumers(graph: onnx.GraphProto) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            counts[name] = counts.get(name, 0) + 1
    return counts


def _bias_add(node: Optional[onnx.NodeProto], producers: Dict[str, onnx.NodeProto],
              inits: Dict[str, onnx.TensorProto], consumers: Dict[str, int], outputs: set
              ) -> "Tuple[Optional[onnx.NodeProto], Optional[onnx.NodeProto]]":
    """(the convolution, the Add of its per-channel bias or None) before a BN: ``node`` itself,
    or the ConvTranspose an ``Add(convT, b)`` reads, b a constant of one value per channel
    (shape [C, 1, 1] or [1, C, 1, 1]) and the ConvTranspose read only by the Add."""
    if node is None or node.op_type != "Add" or len(node.input) != 2:
        return node, None
    conv = producers.get(node.input[0])
    bias = inits.get(node.input[1])
    if conv is None or conv.op_type != "ConvTranspose" or bias is None:
        return None, None
    channels = [d for d in bias.dims]
    if len(channels) not in (3, 4) or any(d != 1 for d in channels[-2:]) or \
            (len(channels) == 4 and channels[0] != 1) or node.output[0] in outputs or \
            consumers.get(node.output[0], 0) != 1 or bias.data_type != onnx.TensorProto.FLOAT:
        return None, None
    return conv, node


def _foldable(conv: onnx.NodeProto, bn: onnx.NodeProto, inits: Dict[str, onnx.TensorProto],
              consumers: Dict[str, int], outputs: set) -> bool:
    """A plain Conv or ConvTranspose (no output_shape) whose only reader is this inference-mode
    BN (or the bias Add before it), every parameter constant."""
    if conv.op_type not in ("Conv", "ConvTranspose") or conv.domain not in ("", "ai.onnx") \
            or len(bn.output) != 1:
        return False
    if any(a.name == "output_shape" for a in conv.attribute):
        return False  # the pads it implies are not the attribute's; left as it is
    if consumers.get(conv.output[0], 0) != 1 or conv.output[0] in outputs:
        return False
    params = list(conv.input[1:]) + list(bn.input[1:5])
    if len(bn.input) < 5 or any(p not in inits for p in params if p):
        return False
    training = next((a.i for a in bn.attribute if a.name == "training_mode"), 0)
    return not training and inits[conv.input[1]].data_type == onnx.TensorProto.FLOAT


def _fold(conv: onnx.NodeProto, bn: onnx.NodeProto, inits: Dict[str, onnx.TensorProto],
          graph: onnx.GraphProto, add: Optional[onnx.NodeProto] = None) -> None:
    gamma, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64)
                              for n in bn.input[1:5])
    eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    # eps is a float32 attribute: onnxruntime adds it in float32 too, then takes the root.
    scale = gamma / np.sqrt(var + np.float64(np.float32(eps)))
    weight = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
    bias: Optional[np.ndarray] = None
    if len(conv.input) > 2 and conv.input[2]:
        bias = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64)
    if add is not None:
        added = numpy_helper.to_array(inits[add.input[1]]).astype(np.float64).reshape(-1)
        bias = added if bias is None else bias + added
    new_weight = _scaled(conv, weight, scale).astype(np.float32)
    new_bias = (((bias if bias is not None else 0.0) - mean) * scale + beta).astype(np.float32)
    base = conv.name or conv.output[0]
    names = (f"{base}_bn_folded_W", f"{base}_bn_folded_B")
    graph.initializer.extend([numpy_helper.from_array(new_weight, names[0]),
                              numpy_helper.from_array(new_bias, names[1])])
    del conv.input[1:]
    conv.input.extend(names)


def _scaled(conv: onnx.NodeProto, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The weight times ``scale`` along its output channels: axis 0 of a Conv's [O, I/g, ...];
    a ConvTranspose's [I, O/g, ...] holds output channel k * O/g + j at [k * I/g + i, j]."""
    if conv.op_type == "Conv":
        return weight * scale.reshape([-1] + [1] * (weight.ndim - 1))
    group = next((a.i for a in conv.attribute if a.name == "group"), 1)
    blocks = weight.reshape((group, weight.shape[0] // group) + weight.shape[1:])
    factor = scale.reshape([group, 1, weight.shape[1]] + [1] * (weight.ndim - 2))
    return (blocks * factor).reshape(weight.shape)


__all__ = ["fold_batchnorm", "without_batchnorm"]
