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

An integer or bool input is a *mask* (attention or padding) when the model reads it as one: its
values reach a Softmax's input (added to the scores: ``(1 - mask) * -big``, T5's and BERT's
export) or a Where's condition (``Where(mask == 0, -inf, scores)``, DistilBERT's) through
elementwise and layout steps only (``MASK_STEPS``; a comparison only with a constant, so that a
length compared with a computed range, ``Less(Range(T), length)``, is no mask), never through a
Gather's indices, a MatMul or a reduction. Its realistic values are ones over a prefix of the
sequence (the last axis) and zeros after it: what a tokenizer writes for a padded batch.

- requires: an ``onnx.ModelProto``;
- ensures: input name -> the smallest size among the tables its ids directly index (>= 2), for
  the inputs that index one; the integer and bool inputs that are masks, by the rule above; the
  model is not changed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Mapping, Optional

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


#: Steps a mask's values take on their way to the scores: value-preserving and layout ops,
#: elementwise arithmetic and logic (with anything: the mask is added to a computed bias), the
#: data inputs of a Where, and Q/DQ pairs (a quantized model's).
MASK_STEPS = VALUE_PRESERVING | frozenset({
    "Expand", "Slice", "Transpose", "Tile", "Concat", "Not", "And", "Or", "Xor", "Add", "Sub",
    "Mul", "Div", "Neg", "Min", "Max", "Clip", "QuantizeLinear", "DequantizeLinear"})
#: Comparisons a mask passes only against a constant (``mask == 0``).
_COMPARISONS = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
_INTEGER_OR_BOOL = frozenset({onnx.TensorProto.BOOL, onnx.TensorProto.INT8,
                              onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                              onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
                              onnx.TensorProto.UINT16, onnx.TensorProto.UINT32,
                              onnx.TensorProto.UINT64})


@dataclass(frozen=True)
class InputKinds:
    """What a model's inputs hold, as its graph reads them (module docstring): the id inputs'
    vocabularies and the mask inputs. An input in neither is of no known kind."""

    vocabularies: Mapping[str, int] = field(default_factory=dict)
    masks: FrozenSet[str] = frozenset()


def input_kinds(model: onnx.ModelProto) -> InputKinds:
    """The vocabulary of every id input and the integer/bool inputs read as masks."""
    vocabularies = id_vocabularies(model)
    graph = model.graph
    constants = set(_table_dims(graph))
    readers = _readers(graph)
    masks = frozenset(
        value.name for value in graph.input
        if value.name not in vocabularies and value.name not in constants
        and value.type.tensor_type.elem_type in _INTEGER_OR_BOOL
        and _reaches_scores(value.name, readers, constants))
    return InputKinds(vocabularies, masks)


def _readers(graph: onnx.GraphProto) -> Dict[str, List[onnx.NodeProto]]:
    readers: Dict[str, List[onnx.NodeProto]] = {}
    for node in graph.node:
        for tensor in dict.fromkeys(node.input):
            readers.setdefault(tensor, []).append(node)
    return readers


def _reaches_scores(name: str, readers: Mapping[str, List[onnx.NodeProto]],
                    constants: set) -> bool:
    """Whether ``name``'s values reach a Softmax's input or a Where's condition through
    ``MASK_STEPS`` (and comparisons with a constant) only; each tensor visited once."""
    seen, frontier = {name}, [name]
    while frontier:
        tensor = frontier.pop()
        for node in readers.get(tensor, []):
            if node.op_type in ("Softmax", "LogSoftmax") or (
                    node.op_type == "Where" and node.input[0] == tensor):
                return True
            if node.op_type in MASK_STEPS or node.op_type == "Where" or (
                    node.op_type in _COMPARISONS
                    and all(t == tensor or t in constants for t in node.input)):
                fresh = [out for out in node.output if out and out not in seen]
                seen.update(fresh)
                frontier.extend(fresh)
    return False
