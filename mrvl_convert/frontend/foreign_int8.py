"""Other quantizers' QDQ models brought into the int8 the device takes (issue 45, finding 5).

Marvell's int8 layers take one scale per tensor and no zero point (symmetric int8; the codegen
writes every scale as one float). onnxruntime's ``quantize_static`` defaults write per-channel
int8 weights and uint8 activations with zero points, which no int8 rule takes: such a model ran
0% of its MACs on the accelerator. ``bring_foreign_int8`` rewrites the QDQ nodes the device
cannot carry ("foreign": a per-channel scale, a non-zero zero point, or uint8), in one of two
modes:

- ``requantize`` (default): a foreign weight ``DequantizeLinear`` of a constant becomes
  per-tensor symmetric int8 requantized from its dequantized float weight ``w``: scale
  ``s = max|w| / 127``, ``q = round(w / s)`` (within [-127, 127]). A foreign activation
  ``QuantizeLinear`` and the ``DequantizeLinear``s of its output are re-ranged to symmetric int8
  covering the same float range: ``[lo, hi] = [(qmin - zp) s0, (qmax - zp) s0]`` becomes scale
  ``max(|lo|, |hi|) / 127``, zero point 0 (int8). An int32 bias whose scale is no longer its
  layer's ``input_scale x weight_scale`` is re-scaled to it from its dequantized value.
- ``requantize`` then drops the activation pairs between ops no int8 layer takes (a LayerNorm's
  or GELU's pieces, attention's Softmax: ``float_pairs.py``, its bound there), so they match
  their float composites and run in fp16 inside the int8 region, as whole as the float twin.
- ``requantize`` of a model none of whose MAC layers has an int8 form (MatMuls of two
  activations only) is run as ``fp16`` is, and the line says why (``_no_int8_macs``).
- ``fp16``: every QDQ node goes (activation pairs removed, weights and biases replaced by the
  float values they dequantize to), so the model runs as its float form: fp16 on the
  accelerator (one ``-quantize`` setting for the whole compile is what Marvell's flow
  documents, so no foreign model is left half int8).

Contract.
  Requires: a loaded model (``load.py``: shapes inferred, nodes named) whose scales and zero
  points are initializers.
  Ensures: no QDQ node of the result is foreign, except those it cannot rewrite (a per-channel
  activation, a dequantized graph input, scales computed at run time, int16/int4), which stay
  as they were and the int8 rules then keep on CPU with their reason; tensor names are kept.
  Bound (requantize, against the given QDQ model): each weight moves by at most half of its new
  per-tensor step, ``|w' - w| <= max|w| / 254``; each bias by at most half a step of its new
  int32 scale; an activation's range grows to the symmetric ``[-m, m]``, ``m = max(|lo|,
  |hi|)``, and its step to ``m / 127`` (about twice the step of a uint8 activation whose range
  starts at 0, the bit the sign takes); a range starting at 0 keeps its clamp there (a Relu,
  ``_keep_clamp``), other calibrated ends no longer saturate. What this costs at the outputs is measured, not bounded:
  ``foreign_cost.py`` runs both models on onnxruntime and reports it. Exact in ``fp16`` mode
  against the model without its QDQ nodes (the float weights are onnxruntime's own
  dequantization, ``(q - zp) * s`` in float32); its cost against the given model is measured
  the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, List, Optional, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper

from mrvl_convert.core.macs import MAC_OPS
from mrvl_convert.errors import OptionError
from mrvl_convert.frontend.foreign_bn import FOLDED_WEIGHT, fold_batchnorms
from mrvl_convert.frontend.float_pairs import Spans, drop_float_pairs, int8_mac, rank_of
from mrvl_convert.frontend.foreign_dynamic_ops import dynamic_kinds, float_dynamic
from mrvl_convert.frontend.qdq_graph import (EIGHT_BIT, QdqGraph, dequantized, drop_attr,
                                             given_range, known_range)

MODES = ("requantize", "fp16")
_LAYERS_WITH_BIAS = ("Conv", "ConvTranspose", "Gemm")


@dataclass
class ForeignInt8:
    """What the pass changed: counts of rewritten nodes and the kinds of foreign QDQ found."""
    mode: str
    weights: int = 0              # weight DequantizeLinears requantized (or made float)
    activations: int = 0          # activation QuantizeLinears re-ranged (or removed)
    biases: int = 0               # int32 biases re-scaled (or made float)
    batchnorms: int = 0           # BatchNormalizations folded into their Conv (requantize)
    dynamic: int = 0              # dynamic int8 MatMuls (MatMulInteger) made float MatMuls
    dynamic_convs: int = 0        # dynamic int8 Convs (ConvInteger) made float Convs
    dynamic_lstms: int = 0        # DynamicQuantizeLSTMs made float LSTMs
    float_pairs: int = 0          # activation QDQ pairs between ops of no int8 form dropped
    fp16_because: str = ""        # requantize asked, run in fp16 instead: why (no int8 MAC)
    kinds: List[str] = field(default_factory=list)   # "per-channel weights", "uint8 ..."
    left: List[str] = field(default_factory=list)    # foreign nodes it could not rewrite

    @property
    def changed(self) -> bool:
        return bool(self.weights or self.activations or self.biases or self.dynamic
                    or self.dynamic_convs or self.dynamic_lstms)


def check_mode(mode: object) -> str:
    """``mode`` when it is one of ``MODES``; an OptionError otherwise."""
    if mode not in MODES:
        raise OptionError(f"foreign_int8 must be one of {', '.join(MODES)}, got {mode!r}")
    return str(mode)


def bring_foreign_int8(model: onnx.ModelProto, mode: str = "requantize",
                       int8_ops: AbstractSet[str] = frozenset(), spans: Optional[Spans] = None
                       ) -> Tuple[onnx.ModelProto, Optional[ForeignInt8]]:
    """``model`` with its foreign QDQ nodes rewritten as ``mode`` says (a copy), and what was
    done; ``(model, None)`` unchanged when it has no foreign QDQ node. ``int8_ops``: the op
    types the rule set has an int8 form of (``rules/int8_forms.py``); requantized, the pairs
    between ops outside it, and inside ``spans``' composites, are dropped (``float_pairs.py``)."""
    check_mode(mode)
    graph = QdqGraph(model)
    kinds = graph.foreign_kinds()
    kinds += dynamic_kinds(graph)
    if not kinds:
        return model, None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = QdqGraph(out)
    done = ForeignInt8(mode=mode, kinds=kinds)
    float_dynamic(graph, done)
    _float_tables(graph, done)
    done.fp16_because = _no_int8_macs(graph) if mode == "requantize" else ""
    if mode == "requantize" and not done.fp16_because:
        done.batchnorms = fold_batchnorms(graph)
        _requantize(graph, done)
    else:
        _to_float(graph, done)
    graph.commit()
    if int8_ops and mode == "requantize" and not done.fp16_because:
        done.float_pairs = len(drop_float_pairs(out, int8_ops, spans))
    return out, done


# Ops that move int8 values without computing on them: a per-tensor DequantizeLinear after
# them equals the same op after the DequantizeLinear.
_MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Identity")


def _float_tables(graph: QdqGraph, done: ForeignInt8) -> None:
    """``DequantizeLinear(moves(Gather(table, ids)))`` of a constant 8-bit table, per tensor (an
    embedding quantized as a uint8 activation; ``moves``: Transposes, Reshapes... of it) as
    ``moves(Gather(dequantized table, ids))``: exact, a per-tensor dequantization being
    elementwise; the quantized Gather, left unread, goes with canonicalize's cleanup."""
    floats: dict = {}
    for node in graph.qdq_nodes():
        chain = _moved_gather(graph, node)
        if chain is None:
            continue
        gather, moves = chain[0], chain[1:]
        if gather.output[0] not in floats:
            table = dequantized(graph, node, graph.const(gather.input[0]))
            out = f"{gather.output[0]}_float"
            graph.inserted.setdefault(id(gather), []).append(onnx.helper.make_node(
                "Gather", [graph.add_const(f"{gather.input[0]}_dequantized", table),
                           gather.input[1]], [out], name=f"{gather.name}_float",
                axis=next((a.i for a in gather.attribute if a.name == "axis"), 0)))
            floats[gather.output[0]] = out
            done.weights += 1
        source = floats[gather.output[0]]
        for move in moves:
            clone = onnx.NodeProto()
            clone.CopyFrom(move)
            clone.name = f"{move.name}_for_{node.name}"
            clone.input[0], clone.output[0] = source, f"{clone.name}_out"
            graph.inserted.setdefault(id(node), []).append(clone)
            source = clone.output[0]
        node.op_type = "Identity"
        del node.input[:]
        node.input.append(source)
        del node.attribute[:]


def _moved_gather(graph: QdqGraph, dequantize: onnx.NodeProto) -> Optional[list]:
    """[Gather of a constant 8-bit table, the moves after it] a per-tensor DequantizeLinear
    reads, or None."""
    found = graph.params(dequantize)
    if dequantize.op_type != "DequantizeLinear" or found is None or found[0].size != 1:
        return None
    chain, node = [], graph.producer.get(dequantize.input[0])
    while node is not None and node.op_type in _MOVES and len(chain) < 8:
        chain.insert(0, node)
        node = graph.producer.get(node.input[0])
    table = graph.const(node.input[0]) if node is not None and node.op_type == "Gather" else None
    if table is None or table.dtype not in EIGHT_BIT:
        return None
    return [node, *chain]


def _no_int8_macs(graph: QdqGraph) -> str:
    """Why requantizing would leave no MAC in int8 ('' when some MAC layer reading a
    dequantized activation has an int8 form): the device's int8 FC takes a 2-D [batch,
    features] input or a 3-D token tensor times a constant 2-D weight (``mrvl.qnn_fc_tokens``),
    so only a model whose MACs are all MatMuls of two activations (attention's scores and
    context: BatchMatmul, fp16 only) runs them in fp16 whatever its QDQ pairs say. Requantized,
    such a model would only add int8 rounding between fp16 layers; as its float form it is as
    whole as its float twin."""
    macs = [n for n in graph.g.node if n.op_type in MAC_OPS and any(
        _dequantized_activation(graph, name) for name in n.input[:2])]
    if not macs or any(int8_mac(graph, n) for n in macs):
        return ""
    return (f"none of its {len(macs)} MatMuls has an int8 form (the int8 FC takes a 2-D "
            f"input or tokens times a constant weight; e.g. {macs[0].name!r} is "
            f"{rank_of(graph, macs[0].output[0])}-D of two activations), so requantized it would "
            "run its MACs in fp16 between int8 roundings")


def _dequantized_activation(graph: QdqGraph, name: str) -> bool:
    source = graph.producer.get(name)
    return (source is not None and source.op_type == "DequantizeLinear"
            and graph.const(source.input[0]) is None)


def _record_ranges(graph: QdqGraph) -> None:
    for node in graph.qdq_nodes():
        found = graph.params(node)
        if found is not None and found[0].size == 1 and found[2] in EIGHT_BIT:
            graph.ranges[node.output[0]] = given_range(*found)


def _requantize(graph: QdqGraph, done: ForeignInt8) -> None:
    _record_ranges(graph)
    for node in graph.qdq_nodes():
        if node.op_type == "QuantizeLinear" and graph.foreign(node):
            _rerange_activation(graph, node, done)
    for node in graph.qdq_nodes():
        source = graph.const(node.input[0])
        if (node.op_type == "DequantizeLinear" and source is not None and graph.foreign(node)
                and (source.dtype in EIGHT_BIT or node.name.endswith(FOLDED_WEIGHT))):
            _requantize_weight(graph, node, source, done)
    for node in graph.qdq_nodes():
        source = graph.const(node.input[0])
        if node.op_type == "DequantizeLinear" and source is not None and source.dtype == np.int32:
            _rescale_bias(graph, node, source, done)
    done.left = [n.name for n in graph.qdq_nodes() if graph.foreign(n)]


def _symmetric_scale(lo: float, hi: float) -> np.float32:
    """The int8 scale whose [-127, 127] covers [lo, hi] (1 for an all-zero range)."""
    peak = max(abs(lo), abs(hi))
    return np.float32(peak / 127.0) if peak > 0 else np.float32(1.0)


def _rerange_activation(graph: QdqGraph, quantize: onnx.NodeProto, done: ForeignInt8) -> None:
    """A per-tensor QuantizeLinear of an activation and its DequantizeLinears to symmetric int8
    covering the float range the given scale and zero point cover."""
    scale, zero, dtype = graph.params(quantize)
    readers = graph.readers.get(quantize.output[0], [])
    if (scale.size != 1 or dtype not in EIGHT_BIT or graph.const(quantize.input[0]) is not None
            or not all(r.op_type == "DequantizeLinear" and graph.params(r) is not None
                       for r in readers)):
        return
    lo, hi = given_range(scale, zero, dtype)
    new = _symmetric_scale(lo, hi)
    name = quantize.output[0]
    scale_name = graph.add_const(f"{name}_scale_s8", np.array(new, np.float32))
    zero_name = graph.add_const(f"{name}_zero_point_s8", np.array(0, np.int8))
    _keep_clamp(graph, quantize, (lo, hi), new, (scale_name, zero_name))
    for node in [quantize, *readers]:
        del node.input[1:]
        node.input.extend([scale_name, zero_name])
        drop_attr(node, "axis")
    graph.set_elem_type(name, TensorProto.INT8)
    done.activations += 1


def _keep_clamp(graph: QdqGraph, quantize: onnx.NodeProto, given: Tuple[float, float],
                scale: np.float32, params: Tuple[str, str]) -> None:
    """The given quantizer also clamps to its range. Where the range starts at 0 (a Relu
    the quantizer left to its uint8 or zero-point clamp) and the input is not known to be
    non-negative, that clamp is kept as a Relu between int8 QDQ pairs of the new scale (the
    int8 layer before it fuses it as its activation; exact, quantize being monotone and 0 on
    the grid). A calibrated end elsewhere is a saturation, not the model's function: the
    symmetric range holds it and values beyond it are no longer clamped there (part of the
    measured cost)."""
    lo, hi = given
    # an input known above -step/2 (1 + erf(x) with the quantizer's 1 a hair below 1) rounds
    # to 0 at worst: the clamp changes nothing the grid keeps
    if lo != 0.0 or known_range(graph, quantize.input[0])[0] >= -float(scale) / 2:
        return
    source, base = quantize.input[0], quantize.name
    names = [f"{base}_clamp_q", f"{base}_clamp_dq", f"{base}_clamp"]
    q = helper.make_node("QuantizeLinear", [source, *params], [names[0] + "_out"], name=names[0])
    dq = helper.make_node("DequantizeLinear", [names[0] + "_out", *params],
                          [names[1] + "_out"], name=names[1])
    clamp = helper.make_node("Relu", [dq.output[0]], [names[2] + "_out"], name=names[2])
    graph.like(q.output[0], source, TensorProto.INT8)
    graph.like(dq.output[0], source, TensorProto.FLOAT)
    graph.like(clamp.output[0], source, TensorProto.FLOAT)
    graph.inserted.setdefault(id(quantize), []).extend([q, dq, clamp])
    quantize.input[0] = clamp.output[0]


def _requantize_weight(graph: QdqGraph, node: onnx.NodeProto, source: np.ndarray,
                       done: ForeignInt8) -> None:
    """A weight's DequantizeLinear as per-tensor symmetric int8 of its dequantized value (a
    scalar the given quantizer clamped, as the value it clamped: ``_unclamped``)."""
    weight = _unclamped(graph, node, source)
    scale = _symmetric_scale(float(weight.min(initial=0.0)), float(weight.max(initial=0.0)))
    _set_params(graph, node, np.clip(np.rint(weight / scale), -127, 127).astype(np.int8), scale)
    done.weights += 1


def _unclamped(graph: QdqGraph, node: onnx.NodeProto, source: np.ndarray) -> np.ndarray:
    """A constant's dequantized value; a uint8 scalar on a symmetric grid of its own (zero point
    128, ``q - zp`` within one step of the grid's half range 127.5) as the value that grid was
    made for, ``+-127.5 s``.

    Why: onnxruntime 1.18's ``quantize_static`` (uint8 activations) quantizes every initializer,
    a scalar's too, on the symmetric uint8 grid ``s = 2 |v| / 255``, zp 128, on which ``v / s``
    is exactly +-127.5 steps: rounded to 128 and clamped to 255 (or to 0 below), it reads half
    a step short. A GELU's ``1 + erf`` and ``* 0.5`` became 0.99608 and 0.49804 (a LayerNorm's
    epsilon 0.99608e-5): a rounding of the quantizer's, not the model's, and the GELU no longer
    one (its matcher wants 1 and 0.5), so it stayed on CPU between two Mrvl subgraphs. Later
    versions put a scalar on an asymmetric grid that holds it exactly (zp 0: unchanged here);
    int8's symmetric grid is [-127, 127] (zp 0), which holds +-127 steps exactly (unchanged
    too). Only a scalar is its grid's absolute maximum for sure: which of a tensor's edge
    values was the clamped one is not known, so tensors are left as dequantized. The value
    moves by half the given step, ``|v| / 255``: within the bound of the requantization
    (``|v| / 254``, module docstring)."""
    value = dequantized(graph, node, source)
    scale, zero, dtype = graph.params(node)
    if (dtype != np.dtype(np.uint8) or source.size != 1 or scale.size != 1
            or zero.size != 1 or int(zero.reshape(-1)[0]) != 128):
        return value
    steps = int(source.reshape(-1)[0]) - 128
    if abs(abs(steps) - 127.5) != 0.5:
        return value
    edge = np.float32(np.sign(steps) * 127.5 * np.float64(scale.reshape(-1)[0]))
    return np.full(value.shape, edge, dtype=value.dtype)


def _rescale_bias(graph: QdqGraph, node: onnx.NodeProto, source: np.ndarray,
                  done: ForeignInt8) -> None:
    """An int32 bias re-scaled to its layer's input_scale x weight_scale where that changed."""
    target = _product_scale(graph, node)
    scale, _, _ = graph.params(node)
    if target is None or (scale.size == 1 and scale.reshape(-1)[0] == target):
        return
    bias = dequantized(graph, node, source)
    values = np.clip(np.rint(bias.astype(np.float64) / float(target)),
                     np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32)
    _set_params(graph, node, values, target)
    done.biases += 1


def _set_params(graph: QdqGraph, node: onnx.NodeProto, values: np.ndarray,
                scale: np.float32) -> None:
    """The DequantizeLinear of a constant made ``values * scale``, zero point 0, per tensor."""
    name = node.output[0]
    del node.input[:]
    node.input.extend([graph.add_const(f"{name}_{values.dtype.name}", values),
                       graph.add_const(f"{name}_scale_s8", np.array(scale, np.float32)),
                       graph.add_const(f"{name}_zero_point_s8", np.zeros((), values.dtype))])
    drop_attr(node, "axis")


def _product_scale(graph: QdqGraph, bias: onnx.NodeProto) -> Optional[np.float32]:
    """input_scale x weight_scale of the layer reading ``bias`` as its input 2, both per-tensor
    DequantizeLinears (as after the rewrite), else None."""
    readers = graph.readers.get(bias.output[0], [])
    if len(readers) != 1 or readers[0].op_type not in _LAYERS_WITH_BIAS:
        return None
    layer = readers[0]
    if len(layer.input) < 3 or layer.input[2] != bias.output[0]:
        return None
    scales = []
    for name in layer.input[:2]:
        dq = graph.producer.get(name)
        found = graph.params(dq) if dq is not None and dq.op_type == "DequantizeLinear" else None
        if found is None or found[0].size != 1:
            return None
        scales.append(found[0].reshape(-1)[0])
    return np.float32(scales[0] * scales[1])


def _to_float(graph: QdqGraph, done: ForeignInt8) -> None:
    """Every QDQ node gone: constants' DequantizeLinears become their float values, an
    activation's QuantizeLinear -> DequantizeLinear pair an Identity (canonicalize drops it),
    or a Relu where the given range starts at 0 and the input is not known to (the quantizer
    wrote a Relu as that clamp). The saturation at a range's calibrated ends is not kept: the
    float form's, not the quantizer's."""
    _record_ranges(graph)
    for node in graph.qdq_nodes():
        source = graph.const(node.input[0])
        if node.op_type != "DequantizeLinear" or source is None or graph.params(node) is None:
            continue
        graph.add_const(node.output[0], dequantized(graph, node, source))
        graph.dropped.add(id(node))
        if source.dtype == np.int32:
            done.biases += 1
        else:
            done.weights += 1
    for node in graph.qdq_nodes():
        readers = graph.readers.get(node.output[0], [])
        if (node.op_type != "QuantizeLinear" or graph.const(node.input[0]) is not None
                or not readers or not all(r.op_type == "DequantizeLinear" for r in readers)):
            continue
        given = graph.ranges.get(node.output[0], (-np.inf, np.inf))
        relu = given[0] == 0.0 and known_range(graph, node.input[0])[0] < 0.0
        for reader in readers:
            reader.op_type = "Relu" if relu else "Identity"
            del reader.input[:]
            reader.input.append(node.input[0])
            del reader.attribute[:]
        graph.dropped.add(id(node))
        done.activations += 1
    done.left = [n.name for n in graph.qdq_nodes()
                 if id(n) not in graph.dropped and graph.foreign(n)]
