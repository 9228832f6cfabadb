"""Shapes that values decide: the output shape of a node whose size its input values give.

Once the input shapes are fixed, exporters' shape arithmetic is constant, and so are the inputs
of the ops that make a tensor of a size given by values: ``torch.arange(x.shape[1])`` as
``Range(0, n, 1)``, ``torch.zeros(shape)`` as ``ConstantOfShape``, ``expand``/``repeat`` as
``Expand``/``Tile``. ONNX shape inference gives them no shape while those values are computed
(not initializers), so folding could not bound them before computing them
(``folding.py``). Here the shape follows from the constant inputs, as the ONNX spec defines it,
so folding bounds it like any other (``sized_shape``); and ``Shape`` with ``start``/``end``
(opset 15, dynamo's ``sym_size_int``) on a static input is its slice of that shape
(``fold_sliced_shapes``: graphsurgeon's own shape folding ignores the two attributes and
folds the whole shape).

Requires: a graphsurgeon graph. Ensures: nothing approximate; a shape is given only where every
input that decides it is a constant, and one the spec would refuse (``Range`` with a zero
delta, a negative shape, dims that do not broadcast) is None (then folding refuses the node
and onnxruntime says what is wrong with it at run time).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, static_shape

Shape = List[int]


def sized_shape(node: gs.Node) -> Optional[Shape]:
    """The output shape of ``node`` (Range, ConstantOfShape, Expand, Tile) from its constant
    inputs; None for another op, a non-constant input that decides it, or a shape the spec
    refuses."""
    rule = _RULES.get(node.op)
    if rule is None or len(node.inputs) < _ARITY[node.op]:
        return None
    try:
        shape = rule(node)
    except (TypeError, ValueError, OverflowError, IndexError):  # malformed values
        return None
    if shape is None or any(d < 0 for d in shape):
        return None
    return shape


def fold_sliced_shapes(graph: gs.Graph) -> int:
    """Every ``Shape`` with a ``start`` or an ``end`` on a static input becomes the constant
    slice of that shape (the spec's clamping, which Python slicing shares); returns how many."""
    folded = 0
    for node in list(graph.nodes):
        if node.op != "Shape" or not ({"start", "end"} & set(node.attrs)) or not node.outputs:
            continue
        shape = static_shape(node.inputs[0]) if node.inputs else None
        if shape is None:
            continue
        start, end = node.attrs.get("start", 0), node.attrs.get("end", len(shape))
        out = node.outputs[0]
        node.outputs.clear()
        out.to_constant(np.array(shape[int(start):int(end)], np.int64))
        folded += 1
    return folded


def _ints(tensor: gs.Tensor) -> Optional[List[int]]:
    if not is_const(tensor):
        return None
    return [int(v) for v in const_value(tensor).reshape(-1)]


def _range(node: gs.Node) -> Optional[Shape]:
    if not all(is_const(t) for t in node.inputs[:3]):
        return None
    start, limit, delta = (const_value(t).reshape(-1)[0].item() for t in node.inputs[:3])
    if delta == 0:
        return None
    return [max(int(math.ceil((limit - start) / delta)), 0)]


def _constant_of_shape(node: gs.Node) -> Optional[Shape]:
    return _ints(node.inputs[0])


def _expand(node: gs.Node) -> Optional[Shape]:
    data, shape = static_shape(node.inputs[0]), _ints(node.inputs[1])
    if data is None or shape is None:
        return None
    return [int(d) for d in np.broadcast_shapes(tuple(data), tuple(shape))]


def _tile(node: gs.Node) -> Optional[Shape]:
    data, repeats = static_shape(node.inputs[0]), _ints(node.inputs[1])
    if data is None or repeats is None or len(repeats) != len(data):
        return None
    return [d * r for d, r in zip(data, repeats)]


_RULES: Dict[str, Callable[[gs.Node], Optional[Shape]]] = {
    "Range": _range, "ConstantOfShape": _constant_of_shape, "Expand": _expand, "Tile": _tile}
_ARITY = {"Range": 3, "ConstantOfShape": 1, "Expand": 2, "Tile": 2}
