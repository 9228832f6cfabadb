"""A Transpose of rank 5 or more whose input has unit axes, written as the rank-4 Transpose of
the squeezed tensor.

tf2onnx writes a Keras ``MultiHeadAttention``'s head moves through 5-D tensors: ``[1, T, H, D]``
-> Unsqueeze -> ``[1, T, 1, H, D]`` -> Transpose ``[0, 3, 1, 2, 4]`` -> Reshape ``[H, T, D]``
(g2p-id's bert_pron). The layer set takes ranks 2 to 4, so each cut the model. A unit axis
holds no data, so moving it moves nothing: the Transpose of ``x`` by ``perm`` is, element for
element in row-major order, the Transpose of ``x`` without its unit axes U by ``perm`` without U
(each remaining axis renumbered), with the unit axes placed where ``perm`` puts them.

Requires: static shapes around the Transpose.
Ensures: a Transpose of rank r >= 5 with a constant ``perm``, at least r - 4 unit axes in its
input besides axis 0, whose input is written by a Reshape, Unsqueeze, Squeeze or Flatten it
alone reads and whose output only such an op reads (neither a model output; in an int8 model
through the per-tensor QuantizeLinear / DequantizeLinear steps between them, each tensor read
only by the next), has rank 4: the writer becomes a Reshape to the Transpose's input without its
last r - 4 unit axes, the steps between keep their values on that shape, the Transpose keeps its
name with the reduced permutation, and the reader a Reshape of its output to the reader's own
static shape (all three in ``rewritten``). Then ``rank5_detours.py``'s chains take what still
reads rank 5 before the writer. Exact: every op involved copies elements in an order the rewrite
keeps (a Reshape is row-major; a unit axis's index is always 0), and a per-tensor Q/DQ step is
the same function of every element, so it commutes with them (``qdq_steps.py``); tests compare
bit for bit on onnxruntime (``tests/frontend/test_rank5_transposes.py``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, only_reader, static_shape
from mrvl_convert.core.qdq_grid import per_tensor_qdq
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

RESHAPES = frozenset({"Reshape", "Unsqueeze", "Squeeze", "Flatten"})


def squeeze_rank5_transposes(graph: gs.Graph, outputs: Set[str], names: Names,
                             done: Rewrites) -> bool:
    """Rewrite every such Transpose in place; True when one was (``outputs``: the model's
    output names, never rewritten)."""
    changed = False
    for node in list(graph.nodes):
        dropped = _dropped_axes(node, outputs)
        if dropped is not None:
            _squeeze(node, dropped, outputs, names, done)
            changed = True
    return changed


def _dropped_axes(node: gs.Node, outputs: Set[str]) -> Optional[List[int]]:
    """The unit axes to drop (the last r - 4), or None when ``node`` is no such Transpose."""
    if node.op != "Transpose" or len(node.inputs) != 1 or len(node.outputs) != 1:
        return None
    x, y, perm = node.inputs[0], node.outputs[0], attr(node, "perm")
    src, dst = static_shape(x), static_shape(y)
    if src is None or dst is None or perm is None or len(src) < 5:
        return None
    # Axis 0 stays: a batch-1 channel shuffle ([1, g, C/g, H, W], perm [0, 2, 1, 3, 4]) is the
    # shuffle form the Conv2D layers take as one permutation; only inner unit axes go.
    units = [a for a, n in enumerate(src) if n == 1 and a > 0]
    if len(units) < len(src) - 4 or only_reader(x, outputs) is not node:
        return None
    writer, _ = steps_back(x, outputs)
    reader, _ = _forward(y, outputs)
    if writer is None or writer.op not in RESHAPES or static_shape(writer.inputs[0]) is None:
        return None
    if reader is None or reader.op not in RESHAPES or static_shape(reader.outputs[0]) is None:
        return None
    return units[len(units) - (len(src) - 4):]


def steps_back(tensor: gs.Tensor, outputs: Set[str]) -> Tuple[Optional[gs.Node], List[gs.Tensor]]:
    """The writer before ``tensor`` past per-tensor Q/DQ steps (an int8 model's pairs), each
    tensor on the way read only by the next step; and those tensors, ``tensor`` first."""
    passed = [tensor]
    node = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    while node is not None and per_tensor_qdq(node):
        source = node.inputs[0]
        if only_reader(source, outputs) is not node or len(source.inputs) != 1:
            return None, passed
        passed.append(source)
        node = source.inputs[0]
    return node, passed


def _forward(tensor: gs.Tensor,
             outputs: Set[str]) -> Tuple[Optional[gs.Node], List[gs.Tensor]]:
    """The one reader after ``tensor`` past per-tensor Q/DQ steps, and the tensors on the way
    (``tensor`` first), each read only by the next."""
    passed, node = [tensor], only_reader(tensor, outputs)
    while node is not None and per_tensor_qdq(node):
        passed.append(node.outputs[0])
        node = only_reader(node.outputs[0], outputs)
    return node, passed


def _squeeze(node: gs.Node, dropped: List[int], outputs: Set[str], names: Names,
             done: Rewrites) -> None:
    x, y = node.inputs[0], node.outputs[0]
    perm = [int(p) for p in attr(node, "perm")]
    src = static_shape(x)
    kept = [a for a in range(len(src)) if a not in dropped]
    reduced = [kept.index(p) for p in perm if p not in dropped]
    x_shape = [src[a] for a in kept]
    y_shape = [x_shape[p] for p in reduced]
    writer, before = steps_back(x, outputs)
    reader, after = _forward(y, outputs)
    reader_shape = static_shape(reader.outputs[0])
    become_reshape(writer, writer.inputs[0], x_shape, names)
    for tensor in before:  # a per-tensor step is the same function of every element
        tensor.shape = x_shape
    node.attrs["perm"] = reduced
    for tensor in after:
        tensor.shape = y_shape
    become_reshape(reader, after[-1], reader_shape, names)
    done.rewritten[node.name] = (f"a rank-{len(src)} Transpose {perm} moving unit axes "
                                 f"{dropped} became the rank-4 Transpose {reduced} of "
                                 f"{x_shape} (exact: a unit axis holds no data)")
    done.rewritten[writer.name] = f"a Reshape to {x_shape}, the squeezed Transpose's input"
    done.rewritten[reader.name] = (f"a Reshape of the squeezed Transpose's {y_shape} to "
                                   f"{reader_shape}")


def become_reshape(node: gs.Node, source: gs.Tensor, shape: Sequence[int],
                   names: Names) -> None:
    """``node`` becomes a Reshape of ``source`` to the constant ``shape``."""
    target = gs.Constant(names.fresh(f"{node.name}_shape"), np.array(shape, np.int64))
    node.op, node.attrs = "Reshape", {}
    node.inputs.clear()
    node.inputs.extend([source, target])
