"""Bias correction (Nagel et al. 2019, section 4.2, the empirical form): the expected error
int8 weights put on a convolution's output, taken back out of its float bias before quantizing.

With per-tensor weights the rounding error ``E = W_q - W`` does not average out per output
channel: on inputs of mean ``mu`` (per input channel, over the calibration samples) it shifts
output channel o by ``delta[o] = sum_{c,k} E[o, c, k] mu[c]`` on average. The corrected float
model has ``b'[o] = b[o] - delta[o]``; quantized again (its weights quantize to the same int8
values: only biases changed, and the int32 bias is the one place they live), the int8 model's
mean output error per channel is about zero on data like the calibration samples.

It changes the float model on purpose (by ``delta``, which is known): not a rewrite that keeps
the function. ``W_q`` is read from the QDQ model quantize_static wrote (the DequantizeLinear of
each Conv's weight), so it is exactly what the int8 model uses; ``mu`` is measured by
onnxruntime on the float model. A Conv's window over zero padding sees zeros, which ``mu``
does not count: the correction is an estimate, exact only in the interior.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper


def probe_session(model: onnx.ModelProto, names: Iterable[str]) -> object:
    """An onnxruntime session of a copy of the float ``model`` that also outputs the tensors
    ``names`` (float32), so one run reads them all."""
    import onnxruntime as ort
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in names if n not in known)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(probe.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def conv_input_means(model: onnx.ModelProto, feeds: Iterable[Mapping[str, np.ndarray]]
                     ) -> Dict[str, np.ndarray]:
    """Per Conv input tensor, its mean per channel (axis 1) over every feed, by onnxruntime."""
    names = sorted({n.input[0] for n in model.graph.node if n.op_type == "Conv"})
    session = probe_session(model, names)
    sums: Dict[str, np.ndarray] = {}
    counts: Dict[str, int] = {}
    for feed in feeds:
        for name, value in zip(names, session.run(names, dict(feed))):
            axes = tuple(k for k in range(value.ndim) if k != 1)
            sums[name] = sums.get(name, 0.0) + value.astype(np.float64).sum(axis=axes)
            counts[name] = counts.get(name, 0) + value.size // value.shape[1]
    return {name: sums[name] / counts[name] for name in sums}


def correct_biases(model: onnx.ModelProto, qdq: onnx.ModelProto,
                   means: Mapping[str, np.ndarray],
                   only: Optional[Iterable[str]] = None) -> onnx.ModelProto:
    """A copy of the float ``model`` with each Conv's bias (of those ``only`` names, None:
    every Conv's) moved by ``-delta`` (module docstring), ``qdq`` being ``model`` quantized
    (Conv nodes keep their names)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    quantized = _quantized_weights(qdq)
    if only is not None:
        named = set(only)
        quantized = {k: v for k, v in quantized.items() if k in named}
    inits = {t.name: t for t in out.graph.initializer}
    for conv in out.graph.node:
        w_q = quantized.get(conv.name) if conv.op_type == "Conv" else None
        if w_q is None or conv.input[1] not in inits or conv.input[0] not in means:
            continue
        weight = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
        if weight.shape != w_q.shape:
            continue
        delta = _delta(w_q - weight, means[conv.input[0]], _groups(conv))
        if delta is not None:
            _set_bias(out.graph, conv, inits, delta)
    used = {name for node in out.graph.node for name in node.input}
    used |= {i.name for i in out.graph.input}
    for tensor in [t for t in out.graph.initializer if t.name not in used]:
        out.graph.initializer.remove(tensor)  # the biases replaced, read by no one else
    return out


def _groups(conv: onnx.NodeProto) -> int:
    return next((a.i for a in conv.attribute if a.name == "group"), 1)


def _delta(error: np.ndarray, mean: np.ndarray, groups: int) -> Optional[np.ndarray]:
    """sum over input channel c of group g and window k of E[o, c, k] mu[g * Cg + c]."""
    outs, per_group = error.shape[0], error.shape[1]
    if mean.shape != (per_group * groups,) or outs % groups:
        return None
    summed = error.reshape(groups, outs // groups, per_group, -1).sum(axis=3)
    return np.einsum("goc,gc->go", summed, mean.reshape(groups, per_group)).reshape(outs)


def _set_bias(graph: onnx.GraphProto, conv: onnx.NodeProto,
              inits: Dict[str, onnx.TensorProto], delta: np.ndarray) -> None:
    """The Conv's own corrected bias (a new tensor: a shared one stays as it was)."""
    bias = np.zeros(delta.shape)
    if len(conv.input) > 2 and conv.input[2]:
        if conv.input[2] not in inits:
            return
        bias = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64)
    name = f"{conv.name or conv.output[0]}_bias_corrected"
    graph.initializer.append(numpy_helper.from_array((bias - delta).astype(np.float32), name))
    if len(conv.input) > 2:
        conv.input[2] = name
    else:
        conv.input.append(name)


def _quantized_weights(qdq: onnx.ModelProto) -> Dict[str, np.ndarray]:
    """Per Conv node name of the QDQ model, its weight as the int8 model has it (float64)."""
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    dequantized = {n.output[0]: n for n in qdq.graph.node if n.op_type == "DequantizeLinear"}
    weights: Dict[str, np.ndarray] = {}
    for conv in (n for n in qdq.graph.node if n.op_type == "Conv"):
        node = dequantized.get(conv.input[1])
        if node is None or any(i not in inits for i in node.input[:2]):
            continue
        values, scale = inits[node.input[0]].astype(np.float64), inits[node.input[1]]
        zero = inits.get(node.input[2], 0) if len(node.input) > 2 else 0
        shape: List[int] = [-1] + [1] * (values.ndim - 1) if np.size(scale) > 1 else []
        scale64 = np.asarray(scale, np.float64).reshape(shape) if shape else float(scale)
        zero64 = np.asarray(zero, np.float64).reshape(shape) if shape else np.float64(
            np.asarray(zero).reshape(-1)[0] if np.size(zero) else 0)
        weights[conv.name] = (values - zero64) * scale64
    return weights


__all__ = ["conv_input_means", "correct_biases", "probe_session"]
