"""Per-position regions of sequence-first transformers ``[T, 1, E]`` run on ``[1, T, E]``.

torch's ``nn.Transformer`` / ``nn.MultiheadAttention`` (``batch_first=False``, the default)
and models traced from them (g2p-id's tiny-pron) carry activations as ``[T, N, E]`` with
N = 1. The layer set reads axis 0 as the device's batch, so their per-position layers (a
LayerNorm's Sub/Div/Mul, residual and bias Adds) are refused "Mul2D takes batch 1; this one
has batch T". With N = 1, ``[T, 1, E]`` and ``[1, T, E]`` hold the same elements in the same
memory order (issue 45: the batch limit is the device's batch, not a view of positions).

Requires: static shapes.
Ensures: each connected region of per-position ops on ``[T, 1, X]`` tensors (T > 1, no model
output, none an If/Loop body reads, none read outside it by a node writing more than 3 axes: a
``[C, 1, 1]`` gate of a 4-D map) computes on ``[1, T, X]``. Per-position ops: unary elementwise
ops; binary ones (``Add Sub Mul Div Pow Max Min``) of region tensors and constants of rank <= 3 (an
int8 model's dequantized one only broadcasting from the last axis); ``MatMul`` by a 2-D constant
(or int8 weight); reductions (``ReduceMean``, ``ReduceSum``, ``ReduceMax``, ``ReduceMin``) over the
last axis only with kept dims; ``Softmax`` / ``LogSoftmax`` (its axis given) /
``LayerNormalization`` on the last axis; an int8 model's per-tensor QuantizeLinear /
DequantizeLinear. A region's entry is rewritten where it is made: a Transpose producing it takes
the swap into its perm, a Reshape producing it gives ``[1, T, X]``; any other entry (a Gather of
token embeddings, a model input) is read through a Reshape to ``[1, T, X]``. A reader outside the
region reads the old layout: a reduction over the positions (axis 0) reduces axis 1 of the view
instead, a Transpose takes the swap into its perm, a Reshape to an explicit
shape reads it as it is, any other reader reads a Reshape back to ``[T, 1, X]``. A constant operand
whose broadcast shape ``[a, b, X]`` is not ``[1, 1, X]`` is replaced by it with axes 0 and 1
swapped (a positional table ``[T, 1, E]``).

Exact: the same ops on the same values; only the shapes that name their order change (a
constant's swap moves each of its elements to where the same output element now reads it).
One bound: a reduction over the positions
may be summed by onnxruntime in another order on the view; two float32 sums of the same n terms
are at most ``2 (n - 1) u sum |x|`` apart (u = 2**-24), a mean ``2 (n - 1) u mean |x|``. The
tests compare onnxruntime's outputs before and after bit for bit
(``tests/frontend/test_seq_first.py``, ``tests/system/test_fuzz_seq_first.py``).
"""
from __future__ import annotations

from typing import Dict, List, Set

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, reduce_axes, static_shape
from mrvl_convert.core.qdq_grid import per_tensor_qdq
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.rank_ops import dequantized
from mrvl_convert.frontend.sequence_ops import kept_names
from mrvl_convert.frontend.unit_swap import (BINARY, UNARY, produce_swapped, read_swapped,
                                             regions)

_SWAP = (1, 0, 2)
_REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"})
_LAST_AXIS = frozenset({"Softmax", "LogSoftmax", "LayerNormalization"})


def run_sequence_first(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every per-position region of ``graph`` in place (see the module); True when one
    was."""
    kept, names, changed = kept_names(graph), Names(graph), False
    region_ops = [n for n in graph.nodes if _per_position(n, kept)]
    for tensors, ops in regions(region_ops):
        if _read_as_positions(tensors, ops):
            _swap_region(graph, tensors, ops, names, done, kept)
            changed = True
    return changed


def _read_as_positions(tensors: Dict[str, gs.Tensor], ops: List[gs.Node]) -> bool:
    """No tensor of the region is broadcast into a higher rank outside it: a ``[C, 1, 1]``
    gate multiplying a 4-D map is per-channel there, not a sequence of positions."""
    inside = {id(n) for n in ops}
    return all(len(static_shape(out) or []) <= 3 for t in tensors.values()
               for r in t.outputs if id(r) not in inside for out in r.outputs)


def _seq_first(tensor: gs.Tensor) -> bool:
    """A ``[T, 1, X]`` activation, T > 1 (X may be 1: a mean over the last axis)."""
    shape = static_shape(tensor)
    return isinstance(tensor, gs.Variable) and shape is not None and len(shape) == 3 \
        and shape[0] > 1 and shape[1] == 1 and tensor.dtype is not None \
        and (np.issubdtype(np.dtype(tensor.dtype), np.floating)
             or np.dtype(tensor.dtype) in (np.int8, np.uint8))  # an int8 model's Q/DQ


def _constant(tensor: gs.Tensor) -> bool:
    return is_const(tensor) or dequantized(tensor) is not None


def _broadcast3(value_shape) -> List[int]:
    return [1] * (3 - len(value_shape)) + list(value_shape)


def _value(tensor: gs.Tensor) -> np.ndarray:
    return const_value(tensor) if is_const(tensor) else const_value(dequantized(tensor).inputs[0])


def _operand_ok(tensor: gs.Tensor) -> bool:
    """A binary op's constant: rank <= 3; a dequantized one (an int8 model's) must broadcast
    from the last axis alone, as its int8 values are not rewritten here."""
    shape = _value(tensor).shape
    if is_const(tensor):
        return len(shape) <= 3
    return len(shape) <= 3 and _broadcast3(shape)[:2] == [1, 1]


def _last_axis_only(node: gs.Node) -> bool:
    if node.op in _REDUCE:
        return reduce_axes(node) == [2] and int(attr(node, "keepdims", 1)) == 1
    if node.op != "LayerNormalization" and "axis" not in node.attrs:
        return False  # before opset 13 a Softmax's default axis 1 spans [1, T, X]'s T and X
    return int(attr(node, "axis", -1)) in (-1, 2)


def _per_position(node: gs.Node, kept: Set[str]) -> bool:
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if out is None or out.name in kept or not _seq_first(out):
        return False
    variables = [t for t in node.inputs if t.name and not _constant(t)]
    if per_tensor_qdq(node):
        ok = len(variables) == 1 and variables[0] is node.inputs[0]
    elif node.op in UNARY:
        ok = len(node.inputs) == 1
    elif node.op in BINARY:
        ok = len(node.inputs) == 2 and all(_operand_ok(t) for t in node.inputs if _constant(t))
    elif node.op == "MatMul":
        ok = len(variables) == 1 and variables[0] is node.inputs[0] \
            and _constant(node.inputs[1]) and _value(node.inputs[1]).ndim == 2  # or int8 weight
    elif node.op in _REDUCE or node.op in _LAST_AXIS:
        ok = len(variables) == 1 and variables[0] is node.inputs[0] and _last_axis_only(node)
    else:
        ok = False
    return ok and bool(variables) and all(_seq_first(t) for t in variables)


def _swap_region(graph: gs.Graph, tensors: Dict[str, gs.Tensor], ops: List[gs.Node],
                 names: Names, done: Rewrites, kept: Set[str]) -> None:
    inside = {id(n) for n in ops}
    for t in tensors.values():
        old = static_shape(t)
        new = [old[a] for a in _SWAP]
        producer = t.inputs[0] if t.inputs else None
        if producer is None or id(producer) not in inside and (
                t.name in kept or not _rewritable(producer)):  # a model output keeps its shape
            _read_through_view(graph, t, new, ops, names, done)
            continue
        for reader in [r for r in t.outputs if id(r) not in inside]:
            if not _reduce_positions_on_view(reader, t, names):
                read_swapped(graph, reader, t, old, names, done, _SWAP)
        if producer is not None and id(producer) not in inside:
            produce_swapped(producer, new, names, _SWAP)
            done.rewritten[producer.name] = "gives [1, T, X] for the per-position ops after it"
        t.shape = new
    for node in ops:
        if node.op in BINARY:
            _swap_constants(node, names)
        done.rewritten.setdefault(node.name, "computed on [1, T, X] (sequence-first [T, 1, X])")


def _reduce_positions_on_view(reader: gs.Node, tensor: gs.Tensor, names: Names) -> bool:
    """A reduction over the positions (axis 0 of ``[T, 1, X]``) reduces axis 1 of the view:
    the same elements, and the same output shape (``[1, X]``, or ``[1, 1, X]`` kept)."""
    if reader.op not in _REDUCE or reader.inputs[0] is not tensor or reduce_axes(reader) != [0]:
        return False
    if "axes" in reader.attrs:
        reader.attrs["axes"] = [1]
    else:
        reader.inputs[1] = gs.Constant(names.fresh(f"{reader.name}_seq_first_axes"),
                                       np.array([1], np.int64))
    return True


def _rewritable(producer: gs.Node) -> bool:
    """A Transpose or a Reshape to a constant shape: it can give the new shape itself."""
    return len(producer.outputs) == 1 and (
        producer.op == "Transpose" or producer.op == "Reshape" and is_const(producer.inputs[1]))


def _read_through_view(graph: gs.Graph, tensor: gs.Tensor, new: List[int], ops: List[gs.Node],
                       names: Names, done: Rewrites) -> None:
    """The region's readers of ``tensor`` (a model input, a Gather's output, ...) read a
    Reshape of it to ``[1, T, X]``; everything else reads it as it is."""
    view = gs.Variable(names.fresh(f"{tensor.name}_seq_first"), dtype=tensor.dtype, shape=new)
    name = names.fresh(f"{tensor.name}_seq_first_view")
    graph.nodes.append(gs.Node("Reshape", name, inputs=[
        tensor, gs.Constant(names.fresh(f"{name}_shape"), np.array(new, np.int64))],
        outputs=[view]))
    inside = {id(n) for n in ops}
    for reader in [r for r in tensor.outputs if id(r) in inside]:
        done.derived.setdefault(name, reader.name)
        for i, t in enumerate(reader.inputs):
            if t is tensor:
                reader.inputs[i] = view


def _swap_constants(node: gs.Node, names: Names) -> None:
    """A constant that varies along both axes 0 and 1 of its broadcast shape has them swapped
    (a positional table ``[T, 1, E]`` is ``[1, T, E]`` now)."""
    for i, t in enumerate(node.inputs):
        if not is_const(t):
            continue
        value = const_value(t)
        shape = _broadcast3(value.shape)
        if shape[0] == 1 and shape[1] == 1:
            continue  # broadcasts from the last axis the same on either layout
        swapped = np.ascontiguousarray(np.swapaxes(value.reshape(shape), 0, 1))
        node.inputs[i] = gs.Constant(names.fresh(f"{t.name}_seq_first"), swapped)
