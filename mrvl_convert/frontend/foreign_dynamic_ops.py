"""onnxruntime's dynamic int8 Convs, LSTMs and fused MatMuls (``quantize_dynamic``) as float
ones, for ``foreign_int8.py``, as ``foreign_dynamic.py`` makes its MatMulIntegers float MatMuls:

- ``DynamicQuantizeLinear(x) -> ConvInteger(xq, Wq, xzp, wzp) [-> Add(bias_q)] -> Cast ->
  Mul(x_scale * w_scale)`` becomes ``Conv(x, (Wq - wzp) * w_scale [, bias])``, the Conv's
  attributes kept; ``bias_q`` is the bias onnxruntime (1.8's form) quantized at run time,
  ``floor(bias / (x_scale * w_scale))``, whose float bias the Conv takes as it is.
- ``com.microsoft.DynamicQuantizeLSTM(X, Wq, Rq, B, ..., W_scale, W_zp, R_scale, R_zp)``
  becomes the ONNX ``LSTM(X, W, R, B, ...)``, its weights dequantized (per direction or per
  gate column) and transposed from ``[dirs, in, 4h]`` to ONNX's ``[dirs, 4h, in]``, the same
  attributes and outputs.
- onnxruntime's fusions of ``foreign_dynamic.py``'s chain, ``com.microsoft``
  ``DynamicQuantizeMatMul(x, Wq, w_scale, w_zp, bias)`` and ``MatMulIntegerToFloat`` of a
  DynamicQuantizeLinear's outputs, become ``MatMul(x, (Wq - w_zp) * w_scale)`` (``+ bias``).

The device's int8 takes scales fixed at conversion; a scale computed per input at run time has
no carrier, so these layers run in fp16 (whatever ``--foreign-int8`` says), no longer on the
CPU as ConvInteger, DynamicQuantizeLSTM..., which no Marvell layer takes.

Contract.
  Requires: a ``QdqGraph``. A Conv chain as above whose weight, weight zero point (per tensor
  or per output channel) and weight scale (per tensor or per output channel) are constants,
  each node read only by the next; a DynamicQuantizeLSTM whose weights, scales and zero points
  are constants; a fused MatMul whose weight (2-D), scale and zero point (per tensor or per
  column) are.
  Ensures: the last Mul computes the float Conv under its own output name (the rest of the
  chain is left unread: ``QdqGraph.commit`` drops it); the LSTM node is rewritten in place
  (its output names kept), as is a fused MatMul (a MatMul, or an Add after one).
  Bound: not exact against the given model. The weights are its dequantized ones, bit for
  bit; what is gone is the per-input uint8 quantization of the activations: each element of a
  Conv's (or fused MatMul's) ``x`` moved by up to half a step of its run-time scale,
  ``(max(x, 0) - min(x, 0)) / 510``, per tensor; a Conv bias by under one step of
  ``x_scale * w_scale`` (the floor); an LSTM's ``X`` and its hidden state ``h_t`` by half a
  step of their run-time scales, per step.
  What that costs at the outputs is measured (``foreign_cost.py``).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx

from mrvl_convert.frontend.foreign_dynamic import (dynamic_matmuls, float_matmuls, only_reader,
                                                   scaled_output, weight_scale)
from mrvl_convert.frontend.qdq_graph import QdqGraph

_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_LSTM_INPUTS = 8      # X, W, R, B, sequence_lens, initial_h, initial_c, P


def dynamic_convs(graph: QdqGraph) -> int:
    """How many ConvInteger chains ``float_convs`` would rewrite."""
    return sum(_conv_chain(graph, n) is not None for n in graph.g.node
               if n.op_type == "ConvInteger")


def float_convs(graph: QdqGraph) -> int:
    """Rewrite every ConvInteger chain (module docstring); returns how many."""
    done = 0
    for node in list(graph.g.node):
        found = _conv_chain(graph, node) if node.op_type == "ConvInteger" else None
        if found is None:
            continue
        x, weight, bias, output_mul = found
        inputs = [x, graph.add_const(f"{node.name}_dequantized_weight", weight)]
        if bias is not None:
            inputs.append(graph.add_const(f"{node.name}_float_bias", bias))
        output_mul.op_type = "Conv"
        del output_mul.input[:]
        output_mul.input.extend(inputs)
        del output_mul.attribute[:]
        output_mul.attribute.extend(a for a in node.attribute if a.name in _CONV_ATTRS)
        done += 1
    return done


def _conv_chain(graph: QdqGraph, conv: onnx.NodeProto
                ) -> Optional[Tuple[str, np.ndarray, Optional[np.ndarray], onnx.NodeProto]]:
    """(x, the float weight, the float bias or None, the output Mul) of a dynamic int8 Conv
    chain, or None."""
    quantize = graph.producer.get(conv.input[0])
    weight = graph.const(conv.input[1])
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear" or weight is None \
            or conv.input[2:3] != quantize.output[2:3]:  # x's zero point: the run-time one
        return None
    zero = graph.const(conv.input[3]) if len(conv.input) > 3 and conv.input[3] else np.zeros(())
    bias_add = only_reader(graph, conv.output[0], "Add")
    bias = _integer_bias(graph, bias_add, conv, quantize) if bias_add is not None else None
    if zero is None or (bias_add is not None and bias is None):
        return None
    found = scaled_output(graph, conv, quantize, bias_add)
    if found is None:
        return None
    output_mul, w_scale = found
    per_channel = [_per_channel(zero, weight.shape[0], weight.ndim, True),
                   _per_channel(w_scale, weight.shape[0], weight.ndim, False)]
    if any(v is None for v in per_channel):
        return None
    wide = weight.astype(np.int64) - per_channel[0].astype(np.int64)
    return (quantize.input[0], wide.astype(np.float32) * per_channel[1].astype(np.float32),
            bias, output_mul)


def _per_channel(value: np.ndarray, channels: int, rank: int,
                 zero_point: bool) -> Optional[np.ndarray]:
    """``value`` shaped to broadcast over a ``[M, C, k...]`` weight, or None: a scalar, or one
    per output channel: ``[M]`` as ConvInteger's weight zero point is, or, a scale multiplying
    the ``[N, M, ...]`` output, a shape whose only axis above 1 is the output's axis 1."""
    if value.size == 1:
        return value.reshape(())
    if zero_point:
        ok = value.shape == (channels,)
    else:
        padded = [1] * (rank - value.ndim) + list(value.shape)
        ok = value.ndim <= rank and padded[1] == channels and value.size == channels
    return value.reshape([channels] + [1] * (rank - 1)) if ok else None


def _integer_bias(graph: QdqGraph, add: onnx.NodeProto, conv: onnx.NodeProto,
                  quantize: onnx.NodeProto) -> Optional[np.ndarray]:
    """The float bias ``b`` of onnxruntime's run-time quantized bias, ``Reshape(Cast(Floor(
    Div(b, Mul(x_scale, w_scale)))))`` added to the accumulator, or None."""
    other = [t for t in add.input if t != conv.output[0]]
    node = graph.producer.get(other[0]) if len(other) == 1 else None
    while node is not None and node.op_type in ("Reshape", "Cast", "Floor", "Round"):
        node = graph.producer.get(node.input[0])
    if node is None or node.op_type != "Div":
        return None
    bias = graph.const(node.input[0])
    scales = graph.producer.get(node.input[1])
    if bias is None or weight_scale(graph, scales, quantize) is None:
        return None
    return bias.reshape(-1).astype(np.float32)


def dynamic_lstms(graph: QdqGraph) -> int:
    """How many DynamicQuantizeLSTMs ``float_lstms`` would rewrite."""
    return sum(_lstm_weights(graph, n) is not None for n in graph.g.node)


def float_lstms(graph: QdqGraph) -> int:
    """Rewrite every DynamicQuantizeLSTM as an LSTM (module docstring); returns how many."""
    done = 0
    for node in graph.g.node:
        weights = _lstm_weights(graph, node)
        if weights is None:
            continue
        inputs = list(node.input[:_LSTM_INPUTS])
        inputs[1] = graph.add_const(f"{node.name}_dequantized_W", weights[0])
        inputs[2] = graph.add_const(f"{node.name}_dequantized_R", weights[1])
        while inputs and not inputs[-1]:
            inputs.pop()
        node.op_type, node.domain = "LSTM", ""
        del node.input[:]
        node.input.extend(inputs)
        done += 1
    return done


def _lstm_weights(graph: QdqGraph, node: onnx.NodeProto
                  ) -> Optional[List[np.ndarray]]:
    """ONNX LSTM's float W and R of a DynamicQuantizeLSTM, or None (not one, or not
    constant)."""
    if node.op_type != "DynamicQuantizeLSTM" or len(node.input) < 12:
        return None
    out = []
    for weight, scale, zero in ((1, 8, 9), (2, 10, 11)):
        arrays = [graph.const(node.input[i]) if node.input[i] else None
                  for i in (weight, scale, zero)]
        if arrays[0] is None or arrays[1] is None or arrays[0].ndim != 3:
            return None
        out.append(_dequantized_gates(*arrays))
    return None if any(w is None for w in out) else out


def _dequantized_gates(weight: np.ndarray, scale: np.ndarray,
                       zero: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``[dirs, in, 4h]`` int8 weight, scale and zero point per direction or per gate column,
    as ONNX LSTM's float ``[dirs, 4h, in]``."""
    dirs, _, columns = weight.shape
    zero = np.zeros((), np.int64) if zero is None else zero
    shaped = []
    for value in (zero, scale):
        if value.size not in (1, dirs, dirs * columns):
            return None
        shaped.append(value.reshape(-1, 1, columns if value.size == dirs * columns else 1)
                      if value.size > 1 else value.reshape(()))
    wide = weight.astype(np.int64) - shaped[0].astype(np.int64)
    return np.ascontiguousarray(
        (wide.astype(np.float32) * shaped[1].astype(np.float32)).transpose(0, 2, 1))


def dynamic_fused_matmuls(graph: QdqGraph) -> int:
    """How many com.microsoft DynamicQuantizeMatMul/MatMulIntegerToFloat ``float_fused_matmuls``
    would rewrite."""
    return sum(_fused_matmul(graph, n) is not None for n in graph.g.node)


def float_fused_matmuls(graph: QdqGraph) -> int:
    """Every ``DynamicQuantizeMatMul(x, Wq, w_scale, w_zp, bias)``, and every
    ``MatMulIntegerToFloat(DynamicQuantizeLinear(x), Wq, x_scale, w_scale, x_zp, w_zp, bias)``
    (onnxruntime's fusions of the MatMulInteger chain), as ``MatMul(x, (Wq - w_zp) * w_scale)``
    [``+ bias``]; returns how many."""
    done = 0
    for node in list(graph.g.node):
        found = _fused_matmul(graph, node)
        if found is None:
            continue
        x, weight, bias = found
        inputs = [x, graph.add_const(f"{node.name}_dequantized_weight", weight)]
        node.domain = ""
        del node.attribute[:]
        del node.input[:]
        if bias:
            product = onnx.helper.make_node("MatMul", inputs, [f"{node.name}_product"],
                                            name=f"{node.name}_matmul")
            graph.like(product.output[0], node.output[0], onnx.TensorProto.FLOAT)
            graph.inserted.setdefault(id(node), []).append(product)
            node.op_type, inputs = "Add", [product.output[0], bias]
        else:
            node.op_type = "MatMul"
        node.input.extend(inputs)
        done += 1
    return done


_FUSED = {"DynamicQuantizeMatMul": (1, 2, 3, 4), "MatMulIntegerToFloat": (1, 3, 5, 6)}


def _fused_matmul(graph: QdqGraph, node: onnx.NodeProto
                  ) -> Optional[Tuple[str, np.ndarray, str]]:
    """(x, the float weight, the bias's name or '') of a fused dynamic int8 MatMul, or None."""
    if node.op_type not in _FUSED or node.domain != "com.microsoft":
        return None
    names = [node.input[i] if len(node.input) > i else "" for i in _FUSED[node.op_type]]
    weight, scale = graph.const(names[0]), graph.const(names[1])
    zero = graph.const(names[2]) if names[2] else np.zeros((), np.int64)
    x = node.input[0]
    if node.op_type == "MatMulIntegerToFloat":
        quantize = graph.producer.get(x)
        if (quantize is None or quantize.op_type != "DynamicQuantizeLinear"
                or node.input[2] != quantize.output[1] or len(node.input) < 5
                or node.input[4] != quantize.output[2]):
            return None
        x = quantize.input[0]
    if weight is None or scale is None or zero is None or weight.ndim != 2 or not all(
            v.size in (1, weight.shape[1]) and v.ndim <= 1 for v in (scale, zero)):
        return None
    wide = weight.astype(np.int64) - zero.astype(np.int64)
    return x, wide.astype(np.float32) * scale.astype(np.float32), names[3]


def dynamic_kinds(graph: QdqGraph) -> List[str]:
    """The kinds of dynamic int8 layer ``float_dynamic`` would rewrite, for the line."""
    counts = (("dynamic int8 MatMuls", dynamic_matmuls(graph) + dynamic_fused_matmuls(graph)),
              ("dynamic int8 Convs", dynamic_convs(graph)),
              ("dynamic int8 LSTMs", dynamic_lstms(graph)))
    return [kind for kind, count in counts if count]


def float_dynamic(graph: QdqGraph, done) -> None:
    """Every dynamic int8 MatMul, Conv and LSTM as its float form, counted in ``done`` (a
    ``foreign_int8.ForeignInt8``)."""
    done.dynamic = float_matmuls(graph) + float_fused_matmuls(graph)
    done.dynamic_convs = float_convs(graph)
    done.dynamic_lstms = float_lstms(graph)
