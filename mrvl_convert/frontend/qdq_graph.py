"""The QDQ nodes of a model at hand, for ``foreign_int8.py``: each Q/DQ node's scale, zero point
and quantized type, the float range it covers, what it dequantizes a constant to (as onnxruntime
does), and the ranges tensors are known to keep (interval arithmetic over a few ops).

Contract. Requires: an ONNX model whose scales and zero points are initializers (a node whose
are not is reported as having no parameters). Ensures: reads only, except ``add_const``,
``like`` and ``commit``, which change the model as ``foreign_int8.py`` asks.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mrvl_convert.core.scopes import node_reads

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
EIGHT_BIT = (np.dtype(np.int8), np.dtype(np.uint8))
LIMITS = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


class QdqGraph:
    """The model's nodes with their initializers, producers and readers at hand."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.g = model.graph
        self.inits = {i.name: i for i in self.g.initializer}
        self._arrays: Dict[str, Optional[np.ndarray]] = {}
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
        """The initializer ``name`` as an array (read once: callers do not change it)."""
        if name not in self._arrays:
            init = self.inits.get(name)
            self._arrays[name] = None if init is None else numpy_helper.to_array(init)
        return self._arrays[name]

    def add_const(self, name: str, value: np.ndarray) -> str:
        tensor = numpy_helper.from_array(np.asarray(value), name)
        self.new_inits.append(tensor)
        self.inits[name] = tensor
        self._arrays.pop(name, None)
        return name

    def qdq_nodes(self) -> List[onnx.NodeProto]:
        """The Q/DQ nodes as the model will be: inserted ones included, dropped ones not."""
        nodes = [m for n in self.g.node
                 for m in (*self.inserted.get(id(n), ()), n) if id(m) not in self.dropped]
        return [n for n in nodes if n.op_type in QDQ_OPS and n.domain in ("", "ai.onnx")]

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
        """A Q/DQ node the device's int8 cannot carry, in an int8 layer: a weight read by no
        layer with a dequantized activation input (weight-only int8, a float layer) is the
        float weight onnxruntime computes, ``qdq.py`` folds it, and it is not foreign."""
        found = self.params(node)
        if found is None or (self.const(node.input[0]) is not None
                             and not self._in_int8_layer(node)):
            return False
        scale, zero, dtype = found
        if dtype == np.int32:   # a bias: foreign when per-channel (its layer's weight is)
            return node.op_type == "DequantizeLinear" and scale.size > 1
        return dtype in EIGHT_BIT and (scale.size > 1 or bool(np.any(zero != 0))
                                        or dtype == np.uint8)

    def _in_int8_layer(self, dequantize: onnx.NodeProto) -> bool:
        """Some reader of this constant's DequantizeLinear also reads a dequantized activation."""
        for reader in self.readers.get(dequantize.output[0], []):
            for name in reader.input:
                source = self.producer.get(name)
                if (source is not None and source.op_type == "DequantizeLinear"
                        and self.const(source.input[0]) is None):
                    return True
        return False

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
        """Write the changes into the model; nodes nothing reads any more go."""
        keep = [m for n in self.g.node for m in (*self.inserted.get(id(n), ()), n)
                if id(m) not in self.dropped]
        outputs = {o.name for o in self.g.output}
        while True:  # a node whose every output is unread, and then its producers
            # a branch's reads of outer tensors keep their makers (core/scopes.py)
            read = {name for n in keep for name in node_reads(n)} | outputs
            alive = [n for n in keep if not n.output or any(o in read for o in n.output)]
            if len(alive) == len(keep):
                break
            keep = alive
        del self.g.node[:]
        self.g.node.extend(keep)
        self.g.initializer.extend(self.new_inits)
        used = {name for n in self.g.node for name in node_reads(n)} | outputs
        unused = [i for i in self.g.initializer if i.name not in used]
        for init in unused:
            self.g.initializer.remove(init)


def dequantized(graph: QdqGraph, node: onnx.NodeProto, source: np.ndarray) -> np.ndarray:
    """onnxruntime's DequantizeLinear of a constant: ``(q - zp) * s`` in float32, per axis."""
    scale, zero, _ = graph.params(node)
    shape = [1] * source.ndim
    if scale.size > 1:
        axis = int_attr(node, "axis", 1) % source.ndim
        shape[axis] = scale.size
    zero = zero.reshape(shape if zero.size > 1 else ())
    if source.dtype.itemsize <= 2 and zero.dtype.itemsize <= 2:
        # q - zp of 8/16-bit integers is an integer float32 holds exactly: the int64 difference
        # cast to float32, without two full-size int64 copies of a large table
        wide = source.astype(np.float32)
        wide -= zero.astype(np.float32)
    else:  # an int32 bias: its difference rounds once, as onnxruntime's
        wide = (source.astype(np.int64) - zero.astype(np.int64)).astype(np.float32)
    return wide * scale.reshape(shape if scale.size > 1 else ())


def given_range(scale: np.ndarray, zero: np.ndarray, dtype: np.dtype) -> Tuple[float, float]:
    """The float range a per-tensor quantizer covers: ``[(qmin - zp) s, (qmax - zp) s]``."""
    qmin, qmax = LIMITS[dtype]
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


def known_range(graph: QdqGraph, name: str, depth: int = 8) -> Tuple[float, float]:
    """Bounds the values of tensor ``name`` are known to keep in the given model (interval
    arithmetic over a few ops; (-inf, inf) where it cannot tell)."""
    node, value = graph.producer.get(name), graph.const(name)
    if value is not None and value.dtype.kind == "f" and value.size:
        return float(value.min()), float(value.max())
    if node is not None and node.op_type == "DequantizeLinear":
        source = graph.const(node.input[0])
        if source is not None and graph.params(node) is not None:
            value = dequantized(graph, node, source)
            return float(value.min(initial=np.inf)), float(value.max(initial=-np.inf))
        if name in graph.ranges:
            return graph.ranges[name]
    if node is None or depth == 0:
        return -np.inf, np.inf
    if node.op_type in _BOUNDED:
        return _BOUNDED[node.op_type]
    if node.op_type == "Relu":
        return max(0.0, known_range(graph, node.input[0], depth - 1)[0]), np.inf
    if node.op_type == "Pow" and len(node.input) == 2 and _even(
            known_range(graph, node.input[1], depth - 1)):
        return 0.0, np.inf  # a square (a LayerNorm's variance): never negative
    if node.op_type in ("Add", "Mul") and len(node.input) == 2:
        return _combine(node.op_type, *(known_range(graph, t, depth - 1) for t in node.input))
    if node.op_type in _RANGE_KEEPING:
        data = node.input[:1] if node.op_type not in ("Concat",) else node.input
        spans = [known_range(graph, t, depth - 1) for t in data if t]
        return min(s[0] for s in spans), max(s[1] for s in spans)
    return -np.inf, np.inf


def _even(span: Tuple[float, float]) -> bool:
    """One value, an even integer."""
    return span[0] == span[1] and float(span[0]).is_integer() and int(span[0]) % 2 == 0


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


def int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for attr in node.attribute:
        if attr.name == name:
            return int(helper.get_attribute_value(attr))
    return default


def drop_attr(node: onnx.NodeProto, name: str) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
