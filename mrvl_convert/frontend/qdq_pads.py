"""A zero Pad in an int8 (QDQ) region folded into the Conv it feeds, through the per-tensor
QuantizeLinear / DequantizeLinear pairs and the Unsqueeze / Transpose / unit-axis Reshape nodes
between them.

Why. In fp16 a Pad next to its Conv is the ``[Pad] -> Conv`` composite's own padding
(``pad_sinking.py`` moves it there first), but in an int8 model quantize_static writes a QDQ
pair after every op it quantizes: madmom's ``[T, F] -> Pad -> Unsqueeze -> Q -> DQ ->
Transpose -> Q -> DQ -> Conv`` never has the Pad beside the Conv, no int8 rule takes a Pad, and
``pad_forms.py`` leaves a QDQ region's Pad alone. Each such Pad stayed on CPU and cut the model
(madmom's key CNN int8: 9 Mrvl subgraphs where fp16 has 1; openWakeWord's embedding model, its
first Pad read through a pair and tf2onnx's one-channel ``Reshape`` to NCHW: 6 where fp16 has 1).

Requires: static shapes on the chain's tensors; constant pads.
Ensures: a ``Pad`` of mode ``constant``, value 0 (or a DequantizeLinear of constants giving 0),
pads >= 0, whose output reaches a ``Conv``
(``auto_pad`` NOTSET) through nodes each read by the next alone (no graph output among them),
each an ``Unsqueeze``, a ``Transpose``, a ``Reshape`` that only moves unit axes (its target
then the unpadded shape), or a ``QuantizeLinear`` / ``DequantizeLinear`` of a scalar scale and
zero point, with the pads landing on H and W of the Conv's 4-D input only, is
removed: its first reader reads its input, the chain's tensors take their unpadded shapes and
the pads are added to the Conv's own. The Pad is ``merged`` into the Conv.

Exact: the Pad writes zeros; an Unsqueeze or Transpose moves them (``pad_sinking.py``), as
does a Reshape that keeps the order of the axes above 1 (the same bytes), a
QuantizeLinear writes ``round(0 / s) + z = z`` for them and a DequantizeLinear ``(z - z) s = 0``,
so the Conv reads the same tensor with zeros at the same places as its own padding writes. In
float32 a zero product adds nothing to a sum but the sign of a zero (``x + 0 = x``; a sum of
zeros only could be -0 where the padded one is +0, which quantizes alike). Tests run the QDQ
model before and after on onnxruntime and compare bit for bit
(``tests/quantize/test_int8_whole.py``).
"""
from __future__ import annotations

from typing import List, Optional, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, pad_value, present, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.pad_sinking import _moved, full_pads

_QDQ = ("QuantizeLinear", "DequantizeLinear")


def fold_qdq_pads(graph: gs.Graph, done: Rewrites) -> bool:
    """Fold every such Pad of ``graph`` into its Conv, in place; True when one was (the caller
    cleans up and sorts the graph)."""
    outputs, names = {t.name for t in graph.outputs}, Names(graph)
    changed = False
    for pad in [n for n in graph.nodes if n.op == "Pad" and n.outputs]:
        found = _chain(pad, outputs)
        if found is None:
            continue
        chain, conv, pads = found
        _fold(pad, chain, conv, pads, names)
        # what an earlier rewrite merged into the Pad (a lift's Unsqueeze) goes with it
        for name in [k for k, v in done.merged.items() if v == pad.name] + [pad.name]:
            done.merged[name] = conv.name
        changed = True
    return changed


def _is_zero_pad(pad: gs.Node) -> bool:
    if str(attr(pad, "mode", "constant")) != "constant":
        return False
    value = present(pad, 2)
    return pad_value(pad) == 0.0 if value is None or not value.inputs else _dequantized_zero(value)


def _dequantized_zero(value: gs.Tensor) -> bool:
    """The pad value is a DequantizeLinear of constants that gives 0 (the quantizer quantized
    the Pad's constant too: DeepFilterNet's encoder)."""
    source = value.inputs[0]
    if source.op != "DequantizeLinear" or not all(is_const(t) for t in source.inputs if t.name):
        return False
    q, scale = (const_value(t).astype(np.float64) for t in source.inputs[:2])
    zero = const_value(source.inputs[2]).astype(np.float64) if present(source, 2) else 0.0
    return q.size == 1 and float(((q - zero) * scale).reshape(-1)[0]) == 0.0


def _scalar_qdq(node: gs.Node) -> bool:
    """A per-tensor Q/DQ: its scale and zero point are one constant value each (an ``axis``
    then means nothing)."""
    return all(is_const(t) and const_value(t).size == 1 for t in node.inputs[1:] if t.name)


def _dequantized(pad: gs.Node) -> bool:
    # A float model's Pad is the [Pad] -> Conv composite's (pad_forms.py): only int8 ones here.
    return any(n.op == "DequantizeLinear" for n in pad.inputs[0].inputs)


def _passable(node: gs.Node) -> bool:
    return node.op in ("Unsqueeze", "Transpose") or node.op in _QDQ and _scalar_qdq(node) \
        or node.op == "Reshape" and is_const(node.inputs[1])


def _unit_moves(pads: List[int], src: List[int], dst: List[int]) -> Optional[List[int]]:
    """The pads through a Reshape that only inserts, drops or moves unit axes (tf2onnx's
    NHWC -> NCHW of one channel: ``[1, H, W, 1] -> [1, 1, H, W]``): the axes of size above 1
    keep their order and sizes, so each keeps its pads; None for any other Reshape or for pads
    on a unit axis."""
    rank = len(src)
    big_src = [i for i, n in enumerate(src) if n > 1]
    big_dst = [j for j, n in enumerate(dst) if n > 1]
    if [src[i] for i in big_src] != [dst[j] for j in big_dst] or any(
            pads[i] or pads[rank + i] for i in range(rank) if src[i] == 1):
        return None
    moved = [0] * (2 * len(dst))
    for i, j in zip(big_src, big_dst):
        moved[j], moved[len(dst) + j] = pads[i], pads[rank + i]
    return moved


def _chain(pad: gs.Node, outputs: Set[str]
           ) -> Optional[Tuple[List[Tuple[gs.Node, List[int]]], gs.Node, List[int]]]:
    """The nodes from the Pad to its Conv, each with the pads on its output; the Conv; the
    pads on the Conv's input. None when the Pad does not reach a Conv so."""
    src = static_shape(pad.inputs[0])
    if src is None or not _is_zero_pad(pad):
        return None
    pads = full_pads(pad, len(src))
    if pads is None or min(pads) < 0:
        return None
    chain, tensor, rank = [], pad.outputs[0], len(src)
    while True:
        reader = tensor.outputs[0] if len(tensor.outputs) == 1 else None
        if tensor.name in outputs or reader is None or reader.inputs[0] is not tensor:
            return None
        if reader.op == "Conv":
            quantized = _dequantized(pad) or any(n.op in _QDQ for n, _ in chain)
            return (chain, reader, pads) if quantized and _conv_takes(reader, pads) else None
        if not _passable(reader):
            return None
        if reader.op not in _QDQ:
            dst = static_shape(reader.outputs[0])
            pads = None if dst is None else _unit_moves(pads, static_shape(tensor), dst) \
                if reader.op == "Reshape" else _moved(pads, reader, rank)
            if pads is None or len(pads) != 2 * len(dst):
                return None
            rank = len(dst)
        chain.append((reader, pads))
        tensor = reader.outputs[0]


def _conv_takes(conv: gs.Node, pads: List[int]) -> bool:
    """The pads are on H and W of a 2-D Conv with explicit pads of its own."""
    return len(pads) == 8 and not any(pads[i] for i in (0, 1, 4, 5)) \
        and str(attr(conv, "auto_pad", "NOTSET")) == "NOTSET" \
        and len(static_shape(conv.inputs[0]) or []) == 4


def _unpadded(tensor: gs.Tensor, pads: List[int]) -> List[int]:
    half = len(pads) // 2
    return [n - b - e for n, b, e in zip(static_shape(tensor), pads[:half], pads[half:])]


def _fold(pad: gs.Node, chain: List[Tuple[gs.Node, List[int]]], conv: gs.Node,
          pads: List[int], names: Names) -> None:
    first = chain[0][0] if chain else conv
    first.inputs[0] = pad.inputs[0]
    for node, at in chain:
        node.outputs[0].shape = _unpadded(node.outputs[0], at)
        if node.op == "Reshape":  # its constant target: the unpadded shape
            node.inputs[1] = gs.Constant(names.fresh(f"{node.name}_unpadded_shape"),
                                         np.array(node.outputs[0].shape, np.int64))
    own = [int(p) for p in attr(conv, "pads", [0, 0, 0, 0])]
    conv.attrs["pads"] = [own[0] + pads[2], own[1] + pads[3], own[2] + pads[6],
                          own[3] + pads[7]]
    pad.inputs.clear()
    pad.outputs.clear()
