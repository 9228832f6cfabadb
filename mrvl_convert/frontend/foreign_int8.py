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
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.errors import OptionError

MODES = ("requantize", "fp16")
_QDQ = ("QuantizeLinear", "DequantizeLinear")
_EIGHT_BIT = (np.dtype(np.int8), np.dtype(np.uint8))
_LIMITS = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}
_LAYERS_WITH_BIAS = ("Conv", "ConvTranspose", "Gemm")


@dataclass
class ForeignInt8:
    """What the pass changed: counts of rewritten nodes and the kinds of foreign QDQ found."""
    mode: str
    weights: int = 0              # weight DequantizeLinears requantized (or made float)
    activations: int = 0          # activation QuantizeLinears re-ranged (or removed)
    biases: int = 0               # int32 biases re-scaled (or made float)
    kinds: List[str] = field(default_factory=list)   # "per-channel weights", "uint8 ..."
    left: List[str] = field(default_factory=list)    # foreign nodes it could not rewrite

    @property
    def changed(self) -> bool:
        return bool(self.weights or self.activations or self.biases)


def check_mode(mode: object) -> str:
    """``mode`` when it is one of ``MODES``; an OptionError otherwise."""
    if mode not in MODES:
        raise OptionError(f"foreign_int8 must be one of {', '.join(MODES)}, got {mode!r}")
    return str(mode)


def bring_foreign_int8(model: onnx.ModelProto, mode: str = "requantize"
                       ) -> Tuple[onnx.ModelProto, Optional[ForeignInt8]]:
    """``model`` with its foreign QDQ nodes rewritten as ``mode`` says (a copy), and what was
    done; ``(model, None)`` unchanged when it has no foreign QDQ node."""
    check_mode(mode)
    graph = _Graph(model)
    kinds = graph.foreign_kinds()
    if not kinds:
        return model, None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = _Graph(out)
    done = ForeignInt8(mode=mode, kinds=kinds)
    if mode == "requantize":
        _requantize(graph, done)
    else:
        _to_float(graph, done)
    graph.commit()
    return out, done


class _Graph:
    """The model's nodes with their initializers, producers and readers at hand."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.g = model.graph
        self.inits = {i.name: i for i in self.g.initializer}
        self.producer = {o: n for n in self.g.node for o in n.output}
        self.readers: Dict[str, List[onnx.NodeProto]] = {}
        for node in self.g.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.new_inits: List[onnx.TensorProto] = []
        self.dropped: set = set()
        self.inserted: Dict[int, List[onnx.NodeProto]] = {}   # id(node) -> nodes before it
        self.infos = {i.name: i for i in list(self.g.value_info) + list(self.g.input)
                      + list(self.g.output)}
        self.ranges: Dict[str, Tuple[float, float]] = {}   # a Q/DQ output -> its given range

    def const(self, name: str) -> Optional[np.ndarray]:
        init = self.inits.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def add_const(self, name: str, value: np.ndarray) -> str:
        tensor = numpy_helper.from_array(np.asarray(value), name)
        self.new_inits.append(tensor)
        self.inits[name] = tensor
        return name

    def qdq_nodes(self) -> List[onnx.NodeProto]:
        return [n for n in self.g.node if n.op_type in _QDQ and n.domain in ("", "ai.onnx")]

    def params(self, node: onnx.NodeProto) -> Optional[Tuple[np.ndarray, np.ndarray, np.dtype]]:
        """(scale, zero point, quantized dtype) of a Q/DQ node whose scale (and zero point)
        are initializers, else None. ONNX: no zero point means uint8 for QuantizeLinear."""
        scale = self.const(node.input[1]) if len(node.input) > 1 else None
        if scale is None:
            return None
        zero_name = node.input[2] if len(node.input) > 2 else ""
        zero = self.const(zero_name) if zero_name else None
        if zero_name and zero is None:
            return None
        if zero is not None:
            dtype = zero.dtype
        elif node.op_type == "DequantizeLinear" and self.const(node.input[0]) is not None:
            dtype = self.const(node.input[0]).dtype
        else:
            dtype = np.dtype(np.uint8)
        zero = zero if zero is not None else np.zeros((), dtype)
        return scale.astype(np.float32), zero, np.dtype(dtype)

    def foreign(self, node: onnx.NodeProto) -> bool:
        found = self.params(node)
        if found is None:
            return False
        scale, zero, dtype = found
        if dtype == np.int32:   # a bias: foreign when per-channel (its layer's weight is)
            return node.op_type == "DequantizeLinear" and scale.size > 1
        return dtype in _EIGHT_BIT and (scale.size > 1 or bool(np.any(zero != 0))
                                        or dtype == np.uint8)

    def foreign_kinds(self) -> List[str]:
        kinds = set()
        for node in self.qdq_nodes():
            if not self.foreign(node):
                continue
            scale, zero, dtype = self.params(node)
            what = "weights" if self.const(node.input[0]) is not None else "activations"
            if scale.size > 1:
                kinds.add(f"per-channel {what}")
            if dtype == np.uint8:
                kinds.add(f"uint8 {what}")
            elif np.any(zero != 0):
                kinds.add(f"zero-point {what}")
        return sorted(kinds)

    def set_elem_type(self, name: str, elem_type: int) -> None:
        for info in list(self.g.value_info) + list(self.g.output):
            if info.name == name:
                info.type.tensor_type.elem_type = elem_type

    def like(self, name: str, source: str, elem_type: int) -> None:
        """Declare ``name`` with ``source``'s shape and ``elem_type``."""
        info = self.infos.get(source)
        if info is None:
            return
        new = onnx.ValueInfoProto()
        new.CopyFrom(info)
        new.name = name
        new.type.tensor_type.elem_type = elem_type
        self.g.value_info.append(new)

    def commit(self) -> None:
        keep = [m for n in self.g.node if id(n) not in self.dropped
                for m in (*self.inserted.get(id(n), ()), n)]
        del self.g.node[:]
        self.g.node.extend(keep)
        self.g.initializer.extend(self.new_inits)
        used = {name for n in self.g.node for name in n.input} | {o.name for o in self.g.output}
        unused = [i for i in self.g.initializer if i.name not in used]
        for init in unused:
            self.g.initializer.remove(init)


def _record_ranges(graph: _Graph) -> None:
    for node in graph.qdq_nodes():
        found = graph.params(node)
        if found is not None and found[0].size == 1 and found[2] in _EIGHT_BIT:
            graph.ranges[node.output[0]] = _given_range(*found)


def _requantize(graph: _Graph, done: ForeignInt8) -> None:
    _record_ranges(graph)
    for node in graph.qdq_nodes():
        if node.op_type == "QuantizeLinear" and graph.foreign(node):
            _rerange_activation(graph, node, done)
    for node in graph.qdq_nodes():
        source = graph.const(node.input[0])
        if (node.op_type == "DequantizeLinear" and source is not None
                and source.dtype in _EIGHT_BIT and graph.foreign(node)):
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


def _rerange_activation(graph: _Graph, quantize: onnx.NodeProto, done: ForeignInt8) -> None:
    """A per-tensor QuantizeLinear of an activation and its DequantizeLinears to symmetric int8
    covering the float range the given scale and zero point cover."""
    scale, zero, dtype = graph.params(quantize)
    readers = graph.readers.get(quantize.output[0], [])
    if (scale.size != 1 or dtype not in _EIGHT_BIT or graph.const(quantize.input[0]) is not None
            or not all(r.op_type == "DequantizeLinear" and graph.params(r) is not None
                       for r in readers)):
        return
    lo, hi = _given_range(scale, zero, dtype)
    new = _symmetric_scale(lo, hi)
    name = quantize.output[0]
    scale_name = graph.add_const(f"{name}_scale_s8", np.array(new, np.float32))
    zero_name = graph.add_const(f"{name}_zero_point_s8", np.array(0, np.int8))
    _keep_clamp(graph, quantize, (lo, hi), new, (scale_name, zero_name))
    for node in [quantize, *readers]:
        del node.input[1:]
        node.input.extend([scale_name, zero_name])
        _drop_attr(node, "axis")
    graph.set_elem_type(name, TensorProto.INT8)
    done.activations += 1


def _given_range(scale: np.ndarray, zero: np.ndarray, dtype: np.dtype) -> Tuple[float, float]:
    """The float range a per-tensor quantizer covers: ``[(qmin - zp) s, (qmax - zp) s]``."""
    qmin, qmax = _LIMITS[dtype]
    step, offset = float(scale.reshape(-1)[0]), int(zero.reshape(-1)[0])
    return (qmin - offset) * step, (qmax - offset) * step


# Ops whose output lies within the range of their inputs (selections, averages, reshapes).
_RANGE_KEEPING = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Flatten",
                  "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Slice", "Split",
                  "Resize", "Identity", "ReduceMean", "ReduceMax", "ReduceMin", "Gather")


# Ops whose output range is fixed: (lo, hi).
_BOUNDED = {"Erf": (-1.0, 1.0), "Tanh": (-1.0, 1.0), "Sigmoid": (0.0, 1.0),
            "Softmax": (0.0, 1.0), "Exp": (0.0, np.inf), "Sqrt": (0.0, np.inf),
            "Abs": (0.0, np.inf)}


def _known_range(graph: _Graph, name: str, depth: int = 8) -> Tuple[float, float]:
    """Bounds the values of tensor ``name`` are known to keep in the given model (interval
    arithmetic over a few ops; (-inf, inf) where it cannot tell)."""
    node = graph.producer.get(name)
    if node is not None and node.op_type == "DequantizeLinear":
        source = graph.const(node.input[0])
        if source is not None and graph.params(node) is not None:
            value = _dequantized(graph, node, source)
            return float(value.min(initial=np.inf)), float(value.max(initial=-np.inf))
        if name in graph.ranges:
            return graph.ranges[name]
    if node is None or depth == 0:
        return -np.inf, np.inf
    if node.op_type in _BOUNDED:
        return _BOUNDED[node.op_type]
    if node.op_type == "Relu":
        return max(0.0, _known_range(graph, node.input[0], depth - 1)[0]), np.inf
    if node.op_type in ("Add", "Mul") and len(node.input) == 2:
        return _combine(node.op_type, *(_known_range(graph, t, depth - 1) for t in node.input))
    if node.op_type in _RANGE_KEEPING:
        data = node.input[:1] if node.op_type not in ("Concat",) else node.input
        spans = [_known_range(graph, t, depth - 1) for t in data if t]
        return min(s[0] for s in spans), max(s[1] for s in spans)
    return -np.inf, np.inf


def _combine(op: str, a: Tuple[float, float], b: Tuple[float, float]) -> Tuple[float, float]:
    """The range of a + b or a * b for a in ``a``, b in ``b``."""
    with np.errstate(invalid="ignore"):
        if op == "Add":
            values = np.array([a[0] + b[0], a[1] + b[1]])
        else:
            values = np.array([x * y for x in a for y in b])
    if np.isnan(values).any():
        return -np.inf, np.inf
    return float(values.min()), float(values.max())


def _keep_clamp(graph: _Graph, quantize: onnx.NodeProto, given: Tuple[float, float],
                scale: np.float32, params: Tuple[str, str]) -> None:
    """The given quantizer also clamps to its range. Where the range starts at 0 (a Relu
    the quantizer left to its uint8 or zero-point clamp) and the input is not known to be
    non-negative, that clamp is kept as a Relu between int8 QDQ pairs of the new scale (the
    int8 layer before it fuses it as its activation; exact, quantize being monotone and 0 on
    the grid). A calibrated end elsewhere is a saturation, not the model's function: the
    symmetric range holds it and values beyond it are no longer clamped there (part of the
    measured cost)."""
    lo, hi = given
    if lo != 0.0 or _known_range(graph, quantize.input[0])[0] >= 0.0:
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


def _dequantized(graph: _Graph, node: onnx.NodeProto, source: np.ndarray) -> np.ndarray:
    """onnxruntime's DequantizeLinear of a constant: ``(q - zp) * s`` in float32, per axis."""
    scale, zero, _ = graph.params(node)
    shape = [1] * source.ndim
    if scale.size > 1:
        axis = _attr(node, "axis", 1) % source.ndim
        shape[axis] = scale.size
    wide = source.astype(np.int64) - zero.astype(np.int64).reshape(shape if zero.size > 1 else ())
    return (wide.astype(np.float32) * scale.reshape(shape if scale.size > 1 else ()))


def _requantize_weight(graph: _Graph, node: onnx.NodeProto, source: np.ndarray,
                       done: ForeignInt8) -> None:
    """A weight's DequantizeLinear as per-tensor symmetric int8 of its dequantized value."""
    weight = _dequantized(graph, node, source)
    scale = _symmetric_scale(float(weight.min(initial=0.0)), float(weight.max(initial=0.0)))
    values = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
    name = node.output[0]
    del node.input[:]
    node.input.extend([graph.add_const(f"{name}_int8", values),
                       graph.add_const(f"{name}_scale_s8", np.array(scale, np.float32)),
                       graph.add_const(f"{name}_zero_point_s8", np.array(0, np.int8))])
    _drop_attr(node, "axis")
    done.weights += 1


def _rescale_bias(graph: _Graph, node: onnx.NodeProto, source: np.ndarray,
                  done: ForeignInt8) -> None:
    """An int32 bias re-scaled to its layer's input_scale x weight_scale where that changed."""
    target = _product_scale(graph, node)
    scale, _, _ = graph.params(node)
    if target is None or (scale.size == 1 and scale.reshape(-1)[0] == target):
        return
    bias = _dequantized(graph, node, source)
    values = np.clip(np.rint(bias.astype(np.float64) / float(target)),
                     np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32)
    name = node.output[0]
    del node.input[:]
    node.input.extend([graph.add_const(f"{name}_int32", values),
                       graph.add_const(f"{name}_scale_s8", np.array(target, np.float32)),
                       graph.add_const(f"{name}_zero_point_s8", np.array(0, np.int32))])
    _drop_attr(node, "axis")
    done.biases += 1


def _product_scale(graph: _Graph, bias: onnx.NodeProto) -> Optional[np.float32]:
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


def _to_float(graph: _Graph, done: ForeignInt8) -> None:
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
        graph.add_const(node.output[0], _dequantized(graph, node, source))
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
        relu = given[0] == 0.0 and _known_range(graph, node.input[0])[0] < 0.0
        for reader in readers:
            reader.op_type = "Relu" if relu else "Identity"
            del reader.input[:]
            reader.input.append(node.input[0])
            del reader.attribute[:]
        graph.dropped.add(id(node))
        done.activations += 1
    done.left = [n.name for n in graph.qdq_nodes()
                 if id(n) not in graph.dropped and graph.foreign(n)]


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for attr in node.attribute:
        if attr.name == name:
            return int(helper.get_attribute_value(attr))
    return default


def _drop_attr(node: onnx.NodeProto, name: str) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
