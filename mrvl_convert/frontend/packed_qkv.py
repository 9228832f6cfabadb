"""An exact rewrite of the packed Q/K/V head split into 4-D steps the accelerator's layers take.

PaddlePaddle's (and timm's) attention computes q, k and v with one FC and splits them as

    Reshape(qkv [B, N, K*C], [B, N, K, H, d])        K = 3 pieces, C = H * d
    Transpose(perm [2, 0, 3, 1, 4])                  -> [K, B, H, N, d]
    Slice(axis 0, i:i+1) then Squeeze(axis 0)        -> piece i: [B, H, N, d]

The 5-D tensors have no layout on the accelerator (the codegen lays out 2-D to 4-D tensors), so
the head split is cut to CPU, three times per block. Each piece is instead

    Slice(qkv, axis 2, i*C:(i+1)*C)                  -> [B, N, C]       (the Slice node)
    Reshape([B, N, H, d])                            (added, in ``derived``)
    Transpose(perm [0, 2, 1, 3])                     -> [B, H, N, d]    (the Squeeze node)

the same elements in the same order (piece i, head h, token n, channel j is qkv[b, n, i*C + h*d
+ j] in both), so it is exact. It applies when every reader of the Transpose is such a
Slice + Squeeze pair; the Reshape and Transpose, then unread, are listed in ``merged`` with the
first Slice. The Slice and Squeeze keep their names and outputs and are listed in ``rewritten``.

In an int8 (QDQ) model the quantizer wraps the Reshape's, the Transpose's and each Slice's
result in a QuantizeLinear -> DequantizeLinear pair on the grid of the DequantizeLinear that made
qkv (the same per-tensor scale and zero point, as onnxruntime's quantizer shares them across
data movement). Such a pair is the identity on these values: each is ``(q - z) * s`` for an
integer q of the type's range, which the QuantizeLinear maps back to q (``x / s`` is q - z to a
few float32 ulps, far from the rounding boundary at 0.5) and the DequantizeLinear to the same
float. So those pairs are bypassed first (``_unpaired``; listed in ``merged`` with the first
Slice), exactly, and only when the split then rewrites; otherwise they are put back.
"""
from __future__ import annotations

from typing import List, Optional, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, present, static_shape
from mrvl_convert.core.qdq_grid import grid
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

_PERM = [2, 0, 3, 1, 4]


def rewrite_packed_qkv(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite every packed Q/K/V split of ``graph`` in place, recording it in ``done``; True
    when one happened (the caller then cleans up and sorts the graph)."""
    if opset < 10:   # Slice takes its bounds as inputs from opset 10
        return False
    names, changed = Names(graph), False
    for node in list(graph.nodes):
        if node.op == "Transpose" and node.outputs and attr(node, "perm", None) == _PERM:
            rewired = _unpaired(node, names, {t.name for t in graph.outputs})
            pieces = [n.name for n in node.outputs[0].outputs]
            split = _split(graph, node, done, names)
            if not split:
                for reader, index, tensor in reversed(rewired):   # put the pairs back
                    reader.inputs[index] = tensor
            for reader, _, tensor in rewired if split else ():
                pair = [reader] if reader.op == "QuantizeLinear" else tensor.inputs[:1]
                for bypassed in pair:   # the pair's QuantizeLinear, its DequantizeLinear
                    done.merged.setdefault(bypassed.name, pieces[0])
            changed |= split
    return changed


_Rewire = Tuple[gs.Node, int, gs.Tensor]   # (reader, its input index, the tensor it read)


def _unpaired(transpose: gs.Node, names: Names, kept: Set[str]) -> List[_Rewire]:
    """Bypass the identity Q -> DQ pairs after an int8 packed split's Reshape, Transpose and
    Slices (when qkv is a per-tensor DequantizeLinear's result; never a pair that writes a
    graph output, ``kept``); the rewires made."""
    dq = transpose.inputs[0].inputs[0] if len(transpose.inputs[0].inputs) == 1 else None
    q = dq.inputs[0].inputs[0] if dq is not None and len(dq.inputs[0].inputs) == 1 else None
    if q is None or q.op != "QuantizeLinear" or len(q.inputs[0].inputs) != 1:
        return []
    reshape = q.inputs[0].inputs[0]
    if reshape.op != "Reshape" or len(reshape.inputs[0].inputs) != 1:
        return []
    qkv_grid = grid(reshape.inputs[0].inputs[0])   # qkv's DequantizeLinear
    if qkv_grid is None or reshape.inputs[0].inputs[0].op != "DequantizeLinear":
        return []
    rewired: List[_Rewire] = []
    _bypass_after(reshape.outputs[0], qkv_grid, rewired, (names, kept))
    _bypass_after(transpose.outputs[0], qkv_grid, rewired, (names, kept))
    for piece in list(transpose.outputs[0].outputs):   # the Slices, now read directly
        if piece.outputs:
            _bypass_after(piece.outputs[0], qkv_grid, rewired, (names, kept))
    return rewired


def _bypass_after(tensor: gs.Tensor, wanted: Tuple[float, int, str], rewired: List[_Rewire],
                  context: Tuple[Names, Set[str]]) -> None:
    """Readers of a DequantizeLinear(QuantizeLinear(tensor)) on the grid ``wanted`` read
    ``tensor``; the QuantizeLinear, then unread, is detached from it (the split counts its
    readers)."""
    names, kept = context
    for q in list(tensor.outputs):
        if q.op != "QuantizeLinear" or grid(q) != wanted or any(
                t.name in kept for dq in q.outputs[0].outputs for t in dq.outputs):
            continue
        for dq in list(q.outputs[0].outputs):
            if dq.op == "DequantizeLinear" and grid(dq) == wanted:
                for reader in list(dq.outputs[0].outputs):
                    for index, t in enumerate(list(reader.inputs)):
                        if t is dq.outputs[0]:
                            _rewire(reader, index, tensor, rewired)
        if not any(dq.outputs[0].outputs for dq in q.outputs[0].outputs):
            _rewire(q, 0, gs.Variable(names.fresh(f"{q.name}_bypassed")), rewired)


def _rewire(reader: gs.Node, index: int, tensor: gs.Tensor, rewired: List[_Rewire]) -> None:
    rewired.append((reader, index, reader.inputs[index]))
    reader.inputs[index] = tensor


def _packed(transpose: gs.Node) -> Optional[Tuple[gs.Node, gs.Tensor, List[int]]]:
    """(the Reshape, qkv [B, N, K*C], [B, N, K, H, d]) when the Transpose reads such a Reshape."""
    source = transpose.inputs[0]
    if len(source.outputs) != 1 or not source.inputs or source.inputs[0].op != "Reshape":
        return None
    reshape = source.inputs[0]
    qkv, five = reshape.inputs[0], static_shape(source)
    shape = static_shape(qkv)
    if shape is None or five is None or len(shape) != 3 or len(five) != 5:
        return None
    if five[:2] != shape[:2] or five[2] * five[3] * five[4] != shape[2]:
        return None
    return reshape, qkv, five


def _piece(slice_node: gs.Node, pieces: int) -> Optional[Tuple[int, gs.Node]]:
    """(i, the Squeeze) when ``slice_node`` takes piece i of axis 0 and only a Squeeze of axis
    0 reads it."""
    if slice_node.op != "Slice" or len(slice_node.inputs) < 3:
        return None
    bounds = [present(slice_node, k) for k in (1, 2, 3, 4)]
    if any(t is not None and not is_const(t) for t in bounds) or bounds[0] is None:
        return None
    start, end = (int(const_value(t).reshape(-1)[0]) for t in bounds[:2])
    axes = [0] if bounds[2] is None else const_value(bounds[2]).reshape(-1).tolist()
    steps = [1] if bounds[3] is None else const_value(bounds[3]).reshape(-1).tolist()
    if axes != [0] or steps != [1] or not 0 <= start < pieces or end != start + 1:
        return None
    readers = slice_node.outputs[0].outputs
    if len(readers) != 1 or readers[0].op != "Squeeze" or _squeezed(readers[0]) != [0]:
        return None
    return start, readers[0]


def _squeezed(squeeze: gs.Node) -> Optional[List[int]]:
    axes = present(squeeze, 1)
    if axes is not None:
        return const_value(axes).reshape(-1).tolist() if is_const(axes) else None
    return list(attr(squeeze, "axes", []))


def _split(graph: gs.Graph, transpose: gs.Node, done: Rewrites, names: Names) -> bool:
    packed = _packed(transpose)
    out, kept = transpose.outputs[0], {t.name for t in graph.outputs}
    if packed is None or not out.outputs or out.name in kept:
        return False
    reshape, qkv, (batch, tokens, pieces, heads, depth) = packed
    slices = list(out.outputs)
    found = [_piece(node, pieces) for node in slices]
    if any(p is None for p in found) or any(n.outputs[0].name in kept for n in slices):
        return False
    width = heads * depth
    for slice_node, (i, squeeze) in zip(slices, found):
        _rewrite_piece(graph, slice_node, squeeze, qkv, i, (batch, tokens, heads, depth),
                       done, names)
        done.rewritten[slice_node.name] = (
            f"piece {i} of a packed Q/K/V split became Slice {i * width}:{(i + 1) * width} "
            "of its last axis")
        done.rewritten[squeeze.name] = ("Squeeze of a packed Q/K/V piece became Reshape to "
                                        "[B, N, H, d] and Transpose [0, 2, 1, 3]")
    for node in (reshape, transpose):
        done.merged[node.name] = slices[0].name
    return True


def _rewrite_piece(graph: gs.Graph, slice_node: gs.Node, squeeze: gs.Node, qkv: gs.Tensor,
                   i: int, dims: Tuple[int, int, int, int], done: Rewrites,
                   names: Names) -> None:
    batch, tokens, heads, depth = dims
    width = heads * depth

    def ints(suffix: str, values: List[int]) -> gs.Constant:
        return gs.Constant(names.fresh(f"{slice_node.name}_{suffix}"), np.array(values, np.int64))

    part = slice_node.outputs[0]
    part.shape = [batch, tokens, width]
    slice_node.inputs.clear()
    slice_node.inputs.extend([qkv, ints("start", [i * width]), ints("end", [(i + 1) * width]),
                              ints("axis", [2])])
    heads_t = gs.Variable(names.fresh(f"{part.name}_heads"), dtype=part.dtype,
                          shape=[batch, tokens, heads, depth])
    reshape = gs.Node("Reshape", names.fresh(f"{squeeze.name}_reshape"),
                      inputs=[part, ints("heads_shape", [batch, tokens, heads, depth])],
                      outputs=[heads_t])
    graph.nodes.append(reshape)
    done.derived[reshape.name] = squeeze.name
    squeeze.op = "Transpose"
    squeeze.inputs.clear()
    squeeze.inputs.append(heads_t)
    squeeze.attrs.clear()
    squeeze.attrs["perm"] = [0, 2, 1, 3]
