"""An Add broadcasting each operand along the other's unit axis: one operand widened by a 1x1
Conv of one channel, so the Add has an operand of the output's shape.

Additive (Bahdanau) attention scores every pair of steps: ``W x`` as ``[N, T, 1, C]`` plus
``U x`` as ``[N, 1, T, C]`` gives ``[N, T, T, C]`` (text2tashkeel's bilstm: ``Unsqueeze`` on
axes 2 and 1 of the model itself, after its bidirectional LSTM). Each operand broadcasts along
the other's unit axis; the accelerator's Sum2D takes one operand of the output's shape and
broadcasts only the other, so the Add stayed on the CPU and cut the model in two.

Rewrite: ``Add(a, b)`` (either order), both activations, static 4-D shapes, output
``[N, C, H, W]`` with ``C > 1``, ``b`` of shape ``[N, 1, H, W]`` and ``a`` of shape
``[N, C, h, w]`` (``h``, ``w`` each 1 or the output's): ``b`` becomes
``Conv(b, ones[C, 1, 1, 1])`` of shape ``[N, C, H, W]`` (a new node), and the Add adds ``a`` to
it (a one-way broadcast, as Sum2D takes it).

Requires: float32 operands; static shapes (after the lifts: the 4-D views are the ones the layers see).
Ensures: each such Add reads the widened operand first (node listed in ``rewritten``); its
output and its name are unchanged. Exact: each element of the Conv is the one product
``b * 1.0`` (one input channel, a 1x1 window), so the Add sums the same two values, up to the
sign of a zero (onnxruntime's Conv writes ``+0`` for ``-0``, so ``-0 + -0`` becomes ``+0``);
``tests/frontend/test_outer_sums.py`` runs both on onnxruntime.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


def widen_outer_sums(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every such Add in place; True when one was (the caller sorts and cleans up)."""
    names, changed = Names(graph), False
    for node in list(graph.nodes):
        operands = _operands(node)
        if operands is not None:
            _widen(graph, node, *operands, names, done)
            changed = True
    return changed


def _operands(node: gs.Node) -> Optional[Tuple[gs.Tensor, gs.Tensor]]:
    """(the one-channel operand b, the other a) of an Add this module rewrites, or None."""
    if node.op != "Add" or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    if any(is_const(t) or t.dtype != np.float32 for t in node.inputs):
        return None  # the Conv's weight is float32
    out = static_shape(node.outputs[0])
    if out is None or len(out) != 4 or out[1] < 2:
        return None
    for b, a in (node.inputs, reversed(node.inputs)):
        if _widenable(static_shape(b), static_shape(a), out):
            return b, a
    return None


def _widenable(b: Optional[List[int]], a: Optional[List[int]], out: List[int]) -> bool:
    """``b`` is the output's shape but one channel; ``a`` has its channels and neither operand
    has the output's shape (a one-way broadcast maps already)."""
    if b is None or a is None or len(a) != 4 or len(b) != 4 or a == out:
        return False
    if b != [out[0], 1] + out[2:] or a[:2] != out[:2]:
        return False
    return all(d in (1, o) for d, o in zip(a[2:], out[2:]))


def _widen(graph: gs.Graph, node: gs.Node, b: gs.Tensor, a: gs.Tensor, names: Names,
           done: Rewrites) -> None:
    out = static_shape(node.outputs[0])
    weight = gs.Constant(names.fresh(f"{node.name}_ones"),
                         np.ones((out[1], 1, 1, 1), dtype=np.float32))
    wide = gs.Variable(names.fresh(f"{node.name}_wide"), dtype=b.dtype, shape=list(out))
    graph.nodes.append(gs.Node("Conv", names.fresh(f"{node.name}_widen"),
                               {"kernel_shape": [1, 1]}, inputs=[b, weight], outputs=[wide]))
    node.inputs.clear()
    node.inputs.extend([wide, a])
    done.rewritten[node.name] = (f"an Add broadcasting each operand along the other's unit axis "
                                 f"(an outer sum): its one-channel operand widened to {out[1]} "
                                 f"channels by a 1x1 Conv of ones")
