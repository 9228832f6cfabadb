"""The vocabulary of each model input that indexes a table: the ids a sample may hold.

A token-id input is read by a Gather that picks rows of a table (the embedding). The ids that
make sense are those below the table's size along the Gather's axis; ids far below it (0/1, or
below a small table the model also gathers from) are degenerate inputs. The table counted is the
one the Gather reading the input *directly* indexes: the ids reach its ``indices`` through
value-preserving steps only (Cast, Reshape, Flatten, Squeeze, Unsqueeze, Identity, and a Gather
picking constant positions of them: attacut's ``[1, 2, T]`` input holds two id rows). An input is
counted whatever its dtype (a Keras model fed ids as floats Casts them to integers). A table read
by computed indices (T5's 32-entry relative-attention-bias table, indexed by bucketed positions)
is not the vocabulary of any input.

- requires: an ``onnx.ModelProto``;
- ensures: input name -> the smallest size among the tables its ids directly index (>= 2), for
  the inputs that index one; the model is not changed.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import onnx

#: Ops that pass their first input's values through unchanged (only the layout or dtype moves).
VALUE_PRESERVING = frozenset({"Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def _table_dims(graph: onnx.GraphProto) -> Dict[str, List[int]]:
    """Constant tensor name -> dims: initializers, Constant nodes, and a DequantizeLinear or Cast
    of one (a quantized table gathered after dequantizing has the table's dims)."""
    dims = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                dims[node.output[0]] = list(value.dims)
        elif node.op_type in ("DequantizeLinear", "Cast") and node.input \
                and node.input[0] in dims:
            dims[node.output[0]] = dims[node.input[0]]
    return dims


def _gather_axis(node: onnx.NodeProto, rank: int) -> int:
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    return axis + rank if axis < 0 else axis


def _indexed_sizes(graph: onnx.GraphProto, name: str,
                   tables: Dict[str, List[int]]) -> List[int]:
    """Sizes of the tables that Gathers index by ``name``'s values, followed through
    ``VALUE_PRESERVING`` ops (breadth first; each tensor visited once)."""
    readers: Dict[str, List[onnx.NodeProto]] = {}
    for node in graph.node:
        for tensor in node.input:
            readers.setdefault(tensor, []).append(node)
    sizes, seen, frontier = [], {name}, [name]
    while frontier:
        tensor = frontier.pop()
        for node in readers.get(tensor, []):
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == tensor:
                dims = tables.get(node.input[0])
                if dims:
                    sizes.append(dims[_gather_axis(node, len(dims))])
            elif node.input[0] == tensor and (node.op_type in VALUE_PRESERVING or (
                    node.op_type == "Gather" and node.input[1] in tables)):
                fresh = [out for out in node.output if out and out not in seen]
                seen.update(fresh)
                frontier.extend(fresh)
    return [s for s in sizes if s >= 2]


def id_vocabularies(model: onnx.ModelProto) -> Dict[str, int]:
    """Input name -> the size of the smallest table its ids directly index (module docstring);
    inputs that index no constant table are left out."""
    graph = model.graph
    tables = _table_dims(graph)
    initializers = {t.name for t in graph.initializer}
    out = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        sizes = _indexed_sizes(graph, value.name, tables)
        if sizes:
            out[value.name] = min(sizes)
    return out


def vocabulary(model: onnx.ModelProto) -> Optional[int]:
    """The smallest vocabulary over the model's id inputs, None when no input indexes a table."""
    sizes = id_vocabularies(model).values()
    return min(sizes) if sizes else None
