"""A norm's statistic written as a GlobalAveragePool of a 3-D tensor, made the ReduceMean over
the last axis (keeping it) that the LayerNorm forms read.

tf2onnx writes a Keras ``LayerNormalization`` of ``[N, T, C]`` tokens with its moments as
GlobalAveragePool (a pool over the one "spatial" axis of ``[N, C, L]`` is the mean over the
last axis): g2p-id's bert_pron. ``norm_forms.py`` and ``norm_means.py`` look for ReduceMean, so
the norm stayed in tf's batchnorm formula, whose ``r * gamma`` is an outer product of a
statistic and a weight no layer takes ("Mul: not a per-channel affine").

Requires: a graph with static activation shapes, before ``norm_forms.py``.
Ensures: every ``GlobalAveragePool(x)`` of a 3-D ``x`` read as a norm's mean (a ``Sub(x, m)``
reads it) or variance (its input is ``Mul(d, d)``, d a ``Sub(x, m)`` of such a mean) is
``ReduceMean(x, axes=[2], keepdims=1)``: same name and output (``rewritten``). Any other
GlobalAveragePool stays (a 1-D signal network's pool is ``rank_lift.py``'s).

Bound. Both compute the mean of the n values along the last axis: exact in real arithmetic.
In float32 (u = 2**-24) each of onnxruntime's two kernels sums them in its own order, within
``(n - 1) u sum|x|`` of the exact sum, then divides (one rounding), so each is within
``n u mean|x|`` of the exact mean and they differ by at most ``2 n u mean|x|`` (mean|x| over
the n values; for the variance x is ``d * d``). tests/frontend/test_norm_pools.py checks it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

_MEANS = ("GlobalAveragePool", "ReduceMean")


def pools_as_norm_means(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite every such GlobalAveragePool in place; True when one was."""
    names, changed = Names(graph), False
    for node in list(graph.nodes):
        if node.op == "GlobalAveragePool" and _is_3d(node) and _is_norm_stat(node):
            _as_reduce_mean(node, opset, names, done)
            changed = True
    return changed


def _is_3d(node: gs.Node) -> bool:
    shape = static_shape(node.inputs[0]) if node.inputs else None
    return shape is not None and len(shape) == 3 and len(node.outputs) == 1


def _is_norm_stat(node: gs.Node) -> bool:
    """A mean some Sub(x, m) reads, or the mean of Mul(d, d), d = Sub(x, mean of x)."""
    x, m = node.inputs[0], node.outputs[0]
    if any(r.op == "Sub" and r.inputs[0] is x and r.inputs[1] is m for r in m.outputs):
        return True
    square = _writer(x)
    if square is None or square.op != "Mul" or square.inputs[0] is not square.inputs[1]:
        return False
    sub = _writer(square.inputs[0])
    if sub is None or sub.op != "Sub":
        return False
    mean = _writer(sub.inputs[1])
    return mean is not None and mean.op in _MEANS and mean.inputs[0] is sub.inputs[0]


def _writer(tensor: gs.Tensor) -> Optional[gs.Node]:
    return tensor.inputs[0] if len(tensor.inputs) == 1 else None


def _as_reduce_mean(node: gs.Node, opset: int, names: Names, done: Rewrites) -> None:
    node.op, node.attrs = "ReduceMean", {"keepdims": 1}
    if opset >= 18:
        node.inputs.append(gs.Constant(names.fresh(f"{node.name}_axes"),
                                       np.array([2], np.int64)))
    else:
        node.attrs["axes"] = [2]
    done.rewritten[node.name] = ("a norm statistic's GlobalAveragePool of a 3-D tensor became "
                                 "ReduceMean over its last axis: within 2 n 2**-24 mean|x| "
                                 "(frontend/norm_pools.py)")
