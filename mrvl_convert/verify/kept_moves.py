"""Where an exact layer's unrounded result reaches in the QDQ reference (``kept_fp16.py``).

The simulator rounds no exact layer's result (a dequantizing quant layer's is ``q * scale`` in
float32), and the converter drops or absorbs the model's nodes that only hand a value on, so an
fp16 layer reads that result unrounded through them; the reference must not round it there.

- requires: a model (the QDQ model, or it as the converter rewrote it for ``--layers``);
- ensures: ``unrounded_moves`` maps each tensor to the tensors holding its values as they are
  (a move's output, a Cast to float32's, a DequantizeLinear copy of the same quantized tensor);
  ``moved`` closes a set of names under that map. Reads only.
"""
from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

import onnx

# ops that only move their first input's values: what they make of an unrounded tensor is
# unrounded too (the converter absorbs them into the layout, or runs them as exact layers)
_MOVES = frozenset({"Squeeze", "Unsqueeze", "Reshape", "Transpose", "Flatten", "Identity"})


def unrounded_moves(proto: onnx.ModelProto) -> Dict[str, List[str]]:
    """Each tensor of ``proto`` -> the tensors that hold its values as they are."""
    moves: Dict[str, List[str]] = {}
    for node in proto.graph.node:
        if _moves_only(node) and node.input and node.output:
            moves.setdefault(node.input[0], []).append(node.output[0])
    for copies in _dequantized_copies(proto):
        for name in copies:
            moves.setdefault(name, []).extend(c for c in copies if c != name)
    return moves


def _dequantized_copies(proto: onnx.ModelProto) -> List[List[str]]:
    """The outputs of DequantizeLinear nodes with the same inputs and attributes, groups of two
    or more: one float32 value. canonicalize gives each input slot its own copy
    (``frontend/qdq.py``: silero's ``Pow(x, 2)`` as ``Mul(x, x')``), and the artifact's one
    dequantizing quant layer hands both slots its result unrounded; the copy no layer names
    among its source nodes was rounded as a stage input's value would be."""
    groups: Dict[Tuple[Any, ...], List[str]] = {}
    for node in proto.graph.node:
        if node.op_type == "DequantizeLinear" and node.output:
            key = (tuple(node.input), tuple(a.SerializeToString() for a in node.attribute))
            groups.setdefault(key, []).append(node.output[0])
    return [names for names in groups.values() if len(names) > 1]


def _moves_only(node: onnx.NodeProto) -> bool:
    """A node that hands its first input's values on as they are: a move, or a Cast to float32.
    A Cast to float32 of a float32 tensor (a float16-stored model's float32 twin,
    ``frontend/float16_model.py``, keeps its Casts so; half-precision exports such as Silero
    VAD's ``silero_vad_half.onnx`` write them) is an identity the converter drops, so an exact
    layer's float32 result passes it unrounded."""
    if node.op_type == "Cast":
        return any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in node.attribute)
    return node.op_type in _MOVES


def moved(names: Set[str], moves: Dict[str, List[str]]) -> Set[str]:
    """``names`` and what ``unrounded_moves`` makes of them: a dequantizing
    quant layer's float32 result reaches an fp16 Mul2D through a Squeeze the converter absorbed
    (madmom's key CNN: Conv, Transpose, Squeeze, then its BatchNormalization's Mul), and the
    simulator hands it on unrounded; rounded there, the reference was one fp16 step off."""
    found, pending = set(names), list(names)
    while pending:
        for nxt in moves.get(pending.pop(), ()):
            if nxt not in found:
                found.add(nxt)
                pending.append(nxt)
    return found
