"""Per-element regions in tf2onnx's channel-in-batch ``[C, 1, H, W]`` run on ``[1, C, H, W]``.

Around a SpaceToBatch/BatchToSpace pair tf2onnx keeps a model of batch 1 in the layout
``[C, N, H, W]`` (its Transposes ``[3, 0, 1, 2]`` and ``[1, 0, 2, 3]``), and the per-element
ops after the BatchToSpace (a GELU's Mul/Add/Tanh) run there: on the accelerator that is a batch
of C, beyond its limit, and the region stays on the CPU between two accelerator regions. With
N = 1, ``[C, 1, H, W]`` and ``[1, C, H, W]`` hold the same elements in the same memory order, so
the region computes the same on the second shape.

Requires: static shapes; a model of batch 1 (every activation input's axis 0 is 1: an axis 0
above 1 inside it is no batch). ``canonicalize`` runs it only where ``space_to_batch.py``
rewrote a Conv, the one place this layout is known to come from.
Ensures: each connected region of per-element ops (unary, or binary with a scalar constant or
two operands of the region; in an int8 model a per-tensor QuantizeLinear / DequantizeLinear,
and a dequantized scalar constant as the constant; a Concat on axis 0 of such tensors, which
becomes the channel Concat on axis 1) on ``[C, 1, H, W]`` tensors (C > 1, no model output) whose every
entry is a Reshape or a Transpose computes on ``[1, C, H, W]``: the entries' Reshape targets
and Transpose perms are changed to give that shape, a Transpose reading the region takes the
axis swap into its perm, and any other reader reads a Reshape back to ``[C, 1, H, W]``. A
region with another entry (a model input, any other op) is left as it is.

Exact: the same ops on the same values; only the shapes that name their order change.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, static_shape
from mrvl_convert.core.qdq_grid import per_tensor_qdq
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.rank_ops import dequantized
from mrvl_convert.frontend.sequence_ops import kept_names

UNARY = frozenset({"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSigmoid",
                   "HardSwish", "Softplus", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal",
                   "Erf", "Sign", "Atan"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"})
_SWAP = (1, 0, 2, 3)


def unswap_unit_batches(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every such region of ``graph`` in place (see the module); True when one was."""
    if any(s and s[0] != 1 for s in (static_shape(t) for t in graph.inputs if not is_const(t))):
        return False
    kept, names, changed = kept_names(graph), Names(graph), False
    region_ops = [n for n in graph.nodes if _per_element(n, kept)]
    for tensors, ops in regions(region_ops):
        if _entries_movable(tensors, ops):
            _unswap(graph, tensors, ops, names, done)
            changed = True
    return changed


def _swapped(tensor: gs.Tensor, kept: Set[str]) -> bool:
    shape = static_shape(tensor)
    return isinstance(tensor, gs.Variable) and shape is not None and len(shape) == 4 \
        and shape[0] > 1 and shape[1] == 1 and tensor.name not in kept \
        and tensor.dtype is not None and (np.issubdtype(np.dtype(tensor.dtype), np.floating)
                                          or np.dtype(tensor.dtype).itemsize == 1)  # int8 QDQ


def _constant(tensor: gs.Tensor) -> bool:
    """A constant, or an int8 model's DequantizeLinear of one (a constant operand there)."""
    return is_const(tensor) or dequantized(tensor) is not None


def _value(tensor: gs.Tensor) -> np.ndarray:
    return const_value(tensor) if is_const(tensor) else const_value(dequantized(tensor).inputs[0])


def _per_element(node: gs.Node, kept: Set[str]) -> bool:
    if len(node.outputs) != 1 or not _swapped(node.outputs[0], kept):
        return False
    shape = static_shape(node.outputs[0])
    if node.op == "Concat":  # of batches [C_i, 1, H, W]: of channels on [1, C_i, H, W]
        return int(attr(node, "axis")) in (0, -4) and all(
            _swapped(t, kept) and static_shape(t)[1:] == shape[1:] for t in node.inputs)
    variables = [t for t in node.inputs if not _constant(t)]
    constants = [t for t in node.inputs if _constant(t)]
    if per_tensor_qdq(node):  # one scale and zero point: per element (int8 models)
        ok = len(variables) == 1 and variables[0] is node.inputs[0]
    elif node.op in UNARY:
        ok = len(node.inputs) == 1
    else:
        ok = node.op in BINARY and len(node.inputs) == 2 and all(
            _value(t).size == 1 and _value(t).ndim <= 4 for t in constants)
    return ok and bool(variables) and all(
        _swapped(t, kept) and static_shape(t) == shape for t in variables)


def regions(ops: List[gs.Node]) -> Iterator[Tuple[Dict[str, gs.Tensor], List[gs.Node]]]:
    """Connected components of the per-element ops, joined by the tensors they share."""
    owner: Dict[str, int] = {}
    parent = list(range(len(ops)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, node in enumerate(ops):
        for t in [x for x in node.inputs if not _constant(x)] + node.outputs:
            if t.name in owner:
                parent[root(i)] = root(owner[t.name])
            owner[t.name] = i
    groups: Dict[int, List[gs.Node]] = {}
    for i, node in enumerate(ops):
        groups.setdefault(root(i), []).append(node)
    for members in groups.values():
        tensors = {t.name: t for n in members
                   for t in [x for x in n.inputs if not _constant(x)] + n.outputs}
        yield tensors, members


def _entries_movable(tensors: Dict[str, gs.Tensor], ops: List[gs.Node]) -> bool:
    inside = {id(n) for n in ops}
    for t in tensors.values():
        producer = t.inputs[0] if t.inputs else None
        if producer is not None and id(producer) in inside:
            continue
        if producer is None or producer.op not in ("Reshape", "Transpose") \
                or len(producer.outputs) != 1:
            return False
    return True


def _unswap(graph: gs.Graph, tensors: Dict[str, gs.Tensor], ops: List[gs.Node], names: Names,
            done: Rewrites) -> None:
    inside = {id(n) for n in ops}
    for t in tensors.values():
        old = static_shape(t)
        new = [old[a] for a in _SWAP]
        for reader in [r for r in t.outputs if id(r) not in inside]:
            read_swapped(graph, reader, t, old, names, done)
        producer = t.inputs[0]
        if id(producer) not in inside:
            produce_swapped(producer, new, names)
            done.rewritten[producer.name] = "gives [1, C, H, W] for the per-element ops after it"
        t.shape = new
    for node in ops:
        if node.op == "Concat":
            node.attrs["axis"] = 1
        done.rewritten.setdefault(node.name, "computed on [1, C, H, W] (tf2onnx's [C, 1, H, W])")


def produce_swapped(producer: gs.Node, new: List[int], names: Names,
                    swap: Sequence[int] = _SWAP) -> None:
    """``producer`` (a Transpose or a Reshape to a constant shape) writes ``new`` instead."""
    if producer.op == "Transpose":
        perm = attr(producer, "perm")
        producer.attrs["perm"] = [int(perm[a]) for a in swap]
    else:
        shape = gs.Constant(names.fresh(f"{producer.name}_unit_swap"), np.array(new, np.int64))
        producer.inputs[1] = shape
        producer.attrs.pop("allowzero", None)


def read_swapped(graph: gs.Graph, reader: gs.Node, tensor: gs.Tensor, old: List[int],
                  names: Names, done: Rewrites, swap: Sequence[int] = _SWAP) -> None:
    """``reader`` reads ``tensor``'s old layout from its new one (``swap`` maps them)."""
    if reader.op == "Transpose":
        reader.attrs["perm"] = [swap[int(a)] for a in attr(reader, "perm")]
        return
    if reader.op == "Reshape" and _explicit(reader):
        return  # the same elements in the same order
    back = gs.Variable(names.fresh(f"{tensor.name}_unit_swap"), dtype=tensor.dtype, shape=old)
    name = names.fresh(f"{reader.name}_unit_swap")
    graph.nodes.append(gs.Node("Reshape", name, inputs=[
        tensor, gs.Constant(names.fresh(f"{name}_shape"), np.array(old, np.int64))],
        outputs=[back]))
    done.derived[name] = reader.name
    for i, t in enumerate(reader.inputs):
        if t is tensor:
            reader.inputs[i] = back


def _explicit(reshape: gs.Node) -> Optional[bool]:
    """A Reshape whose target names no dim by copying it (a 0 the input's shape fills)."""
    target = reshape.inputs[1]
    return is_const(target) and not (const_value(target) == 0).any()
