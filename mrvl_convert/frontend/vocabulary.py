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

The draw of one input as its kind says (``draw_input``) lives here too, so that verify's default
feeds (``verify/reference.random_feeds``) and the requantization cost measured at conversion
(``foreign_cost.drawn_feeds``) draw the same ids and masks.

- requires: an ``onnx.ModelProto``;
- ensures: input name -> the smallest size among the tables its ids directly index (>= 2), for
  the inputs that index one; the integer and bool inputs that are masks, by the rule above; the
  model is not changed. ``draw_input``: ids uniform below their vocabulary, a mask ones over a
  prefix, any other float standard normal, any other integer or bool 0/1.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence

import numpy as np
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


def draw_input(name: str, shape: Sequence[int], dtype: Any, kinds: InputKinds,
               rng: np.random.Generator, first: bool) -> np.ndarray:
    """One sample of input ``name`` drawn as ``kinds`` says it is read: an id input uniform ids
    below its vocabulary (whatever its dtype: a Keras model takes ids as floats), a mask ones
    over a prefix of its last axis (``draw_mask``; ``first``: the first sample, all ones), any
    other float standard normal, any other integer or bool 0/1 (``zero_one``)."""
    vocabulary = kinds.vocabularies.get(name)
    if vocabulary is not None:
        return draw_ids(shape, dtype, vocabulary, rng)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if name in kinds.masks:
        return draw_mask(shape, rng, full=first).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def zero_one(name: str, dtype: Any, kinds: InputKinds) -> bool:
    """Whether ``draw_input`` draws input ``name`` as 0/1 (integer or bool, neither ids nor a
    mask): a figure measured on such draws says little about a model that reads them as
    numbers."""
    return (not np.issubdtype(dtype, np.floating) and name not in kinds.vocabularies
            and name not in kinds.masks)


def draw_ids(shape: Sequence[int], dtype: Any, vocabulary: int,
             rng: np.random.Generator) -> np.ndarray:
    """Ids uniform in [0, vocabulary), of ``shape``, as ``dtype`` (the corpus draws so too)."""
    return rng.integers(0, vocabulary, shape).astype(dtype)


def draw_mask(shape: Sequence[int], rng: np.random.Generator, full: bool) -> np.ndarray:
    """Ones over a prefix of the last axis, zeros after it (a padded sequence), the prefix's
    length uniform in [1, length] per row; ``full``: all ones (the first sample: no padding)."""
    if full or not shape or shape[-1] < 2:
        return np.ones(shape, np.int64)
    lengths = rng.integers(1, shape[-1] + 1, tuple(shape[:-1]))
    return (np.arange(shape[-1]) < np.asarray(lengths)[..., None]).astype(np.int64)
