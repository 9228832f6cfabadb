"""Layout round trips: a chain of Transposes and reshapes that leaves every element where it was.

PyTorch exports of feature tilings write a tensor's move out and back: ICLabel's
``[4, 1, 1, 100]`` -> Transpose ``[3, 2, 1, 0]`` -> Reshape to the same ``[100, 1, 1, 4]`` ->
Transpose ``[3, 2, 1, 0]`` -> ``[4, 1, 1, 100]`` (mne-icalabel's ICLabelNet). The chain computes
the identity, but its Transposes move axis 0, the batch: a Mrvl region holding them reads across
samples, so its batch of 4 cannot run in batch-1 chunks (``rules/batch_axis.py``) and the model
does not fit the device. Run on an index array (``index_moves.py``), the chain says so itself:
every element comes back to its own flat index in the same shape.

Requires: static shapes on the chain; its input at most 2**23 elements (else it is left).
Ensures: every chain of two or more Transpose / Reshape / Squeeze / Unsqueeze / Flatten nodes
holding a Transpose, each tensor between them read only by the next (none a model output),
whose output has its input's shape and, element for element, its input's values, is gone: its
readers read the chain's input, and each node of it is returned with why (report.json's
``removed``). In an int8 model the chain may pass through per-tensor QuantizeLinear /
DequantizeLinear steps: they stay, in their order, on the unmoved tensor. A chain writing a
model output stays. Exact: nothing is computed, elements only move, these moves put each one
back where it was, and a per-tensor Q/DQ step is the same function of every element, so it
commutes with them (a test compares bit for bit on onnxruntime,
``tests/frontend/test_round_trips.py``).
"""
from __future__ import annotations

from typing import Collection, Dict, List

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import only_reader, static_shape
from mrvl_convert.core.qdq_grid import per_tensor_qdq
from mrvl_convert.frontend.index_moves import move

_VIEWS = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
_MAX_ELEMENTS = 1 << 23  # index arrays beyond this are not built (the chain is left as is)
_MAX_CHAIN = 32


def drop_round_trips(graph: gs.Graph) -> Dict[str, str]:
    """Remove every such chain from ``graph`` in place (the caller cleans up); node name ->
    why it is gone."""
    outputs = {t.name for t in graph.outputs}
    gone: Dict[str, str] = {}
    for node in list(graph.nodes):
        if node.name in gone or node.op not in _VIEWS or not node.outputs:
            continue
        chain = _round_trip(node, outputs)
        if chain:
            gone.update(_bypass(chain))
    return gone


def _round_trip(first: gs.Node, outputs: Collection[str]) -> List[gs.Node]:
    """The shortest chain from ``first`` that puts every element back (see the module), or []."""
    source = first.inputs[0] if first.inputs else None
    shape = static_shape(source) if source is not None else None
    if shape is None or int(np.prod(shape)) > _MAX_ELEMENTS or not _may_return(first, outputs):
        return []
    indices = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    array, chain, node = indices, [], first
    while node is not None and len(node.outputs) == 1:
        if node.op in _VIEWS:
            array = move(node, array)
        elif not per_tensor_qdq(node):
            return []
        if array is None:
            return []
        chain.append(node)
        out = node.outputs[0]
        moves = [n for n in chain if n.op in _VIEWS]
        if node.op in _VIEWS and len(moves) > 1 and array.shape == indices.shape \
                and np.array_equal(array, indices) and out.name not in outputs \
                and any(n.op == "Transpose" for n in moves):
            return chain
        node = only_reader(out, outputs)
    return []


def _may_return(first: gs.Node, outputs: Collection[str]) -> bool:
    """A second move and a Transpose on the way (the ops alone): the index arrays are built
    only then, not for every lone Reshape of a large tensor."""
    ops, node = [], first
    while node is not None and len(node.outputs) == 1 and len(ops) < _MAX_CHAIN and (
            node.op in _VIEWS or per_tensor_qdq(node)):
        ops.append(node.op)
        node = only_reader(node.outputs[0], outputs)
    return "Transpose" in ops and sum(op in _VIEWS for op in ops) > 1


def _bypass(chain: List[gs.Node]) -> Dict[str, str]:
    """The chain's Q/DQ steps on its input, in order; its readers read the last of them."""
    source, result = chain[0].inputs[0], chain[-1].outputs[0]
    shape, current = static_shape(source), source
    for step in (n for n in chain if n.op not in _VIEWS):
        step.inputs[0] = current
        current = step.outputs[0]
        current.shape = list(shape)
    for reader in list(result.outputs):
        for i, tensor in enumerate(reader.inputs):
            if tensor is result:
                reader.inputs[i] = current
    moves = [n for n in chain if n.op in _VIEWS]
    ops = " -> ".join(n.op for n in chain)
    why = (f"removed by canonicalize: a layout round trip ({ops}, {chain[0].name!r} to "
           f"{chain[-1].name!r}) that puts every element of {list(shape)} back where it was "
           f"(exact)")
    for node in moves:
        node.outputs.clear()
        node.inputs.clear()
    return {node.name: why for node in moves}
