"""An int8 mean over frames, or over one axis of a 3-D tensor, on the 4-D view its layer takes.

Why. In fp16 ``sequence_lift.py`` computes a batchless ``[T, ...]`` tensor on ``[1, T, ...]``
and a mean over its frames becomes a mean over axis 1, which the layer takes. In a QDQ model
two things broke that:

- the lift stops at an int8 MatMul whose lifted input would be 4-D
  (``sequence_lift._int8_matmul_over_4d``: it stays at batch T), so the tensors after it keep
  their frames on axis 0 and an int8 mean over them stayed on CPU ("it reduces the batch axis 0
  of a 3-D tensor"): madmom's beats TCN in int8, its tempo head's mean over ``[T, 1, 16]``, cut
  the model in two at batch T where fp16 runs it whole;
- a lifted ``[T, C]`` mean is one over axis 1 of ``[1, T, C]``: the int8 rule takes 3-D means
  but the int8 mean's kernel only 4-D ones, and the conversion stopped with an artifact error
  ("expected rank 4").

Requires: static shapes; opset ``opset``.
Ensures: a ``ReduceMean`` over one axis that a ``DequantizeLinear`` of an activation gives and
one ``QuantizeLinear`` alone reads (both of a scalar scale and zero point: the int8 mean's
pattern), its output no graph output, either over axis 0 of a ``[T, ...]`` tensor of rank 2 or
3 (T > 1: the frames), or over axis 1 or 2 of a 3-D tensor, is computed on a 4-D view between
the same scales::

    DQ(q; s) -> Unsqueeze | Reshape -> Q(s) -> DQ(s) -> ReduceMean -> Q(s2) -> DQ(s2)
      -> Reshape(the mean's shape) -> [the mean's output] -> Q(s2) (the model's)

The view: frames ``[T, A, B] -> [1, T, A, B]`` and ``[T, C] -> [1, T, C, 1]``, their mean over
axis 1 (as ``sequence_ops.lift`` moves a lifted reduction's axes); a 3-D ``[B, T, C]`` ->
``[B, T, C, 1]`` by a Reshape (the int8 reshape layer: the batch kept), the same axis (NCHW's
C or H: the layer's NHWC axis 3 or 1). The mean keeps its name (``rewritten``), each added node
is ``derived`` from it.

Exact up to the mean's order of summation. The Unsqueeze and the Reshape copy; a
QuantizeLinear of a dequantized value at the same scale gives back its integer (``q s / s``
rounds to q for ``|q| <= 255``: float32's error is far below half a step) and a second
``Q(s2) -> DQ(s2)`` of a value on the s2 grid is the identity, so every added pair is exact. The
mean is over the same n values; onnxruntime may add them in another order: two float32 means
of n terms are at most ``2 (n - 1) u mean |x|`` apart (u = 2**-24), as for the lift. The tests
run the QDQ model before and after on onnxruntime (``tests/frontend/test_int8_means.py``).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, axes_node
from mrvl_convert.frontend.derived_nodes import DerivedNodes
from mrvl_convert.frontend.sequence_ops import kept_names, lift, reduced_axes

_FRAMES = "an int8 mean over the frames (axis 0) computed on the 4-D view [1, T, ...], over axis 1"
_VIEW = "an int8 mean of a 3-D tensor computed on its 4-D view [B, T, C, 1]"


def int8_means_on_4d(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite every such mean of ``graph`` in place, recording it in ``done``; True when one
    was (the caller then sorts the graph)."""
    outputs, names, changed = kept_names(graph), Names(graph), False
    for mean in [n for n in graph.nodes if n.op == "ReduceMean"]:
        found = _int8_mean(mean, outputs)
        if found is not None:
            _rewrite(graph, mean, *found, opset=opset, names=names, done=done)
            changed = True
    return changed


def _scalar_pair(node: Optional[gs.Node], op: str) -> bool:
    """A QuantizeLinear / DequantizeLinear (``op``) of a constant scalar scale and zero point."""
    return node is not None and node.op == op and all(
        is_const(t) and np.asarray(const_value(t)).ndim == 0 for t in node.inputs[1:] if t.name)


def _int8_mean(mean: gs.Node, outputs: set) -> Optional[Tuple[gs.Node, gs.Node, bool]]:
    """(the DequantizeLinear before, the QuantizeLinear after, over the frames) of an int8
    mean this pass rewrites, or None."""
    x, y = mean.inputs[0], mean.outputs[0]
    shape, axes = static_shape(x), reduced_axes(mean)
    if shape is None or axes is None or len(axes) != 1 or static_shape(y) is None \
            or y.name in outputs or len(y.outputs) != 1:
        return None
    frames = axes == [0] and len(shape) in (2, 3) and shape[0] > 1
    if not frames and not (len(shape) == 3 and axes[0] in (1, 2)):
        return None
    dq = x.inputs[0] if len(x.inputs) == 1 else None
    q = y.outputs[0]
    if not _scalar_pair(dq, "DequantizeLinear") or is_const(dq.inputs[0]) \
            or not _scalar_pair(q, "QuantizeLinear"):
        return None
    return dq, q, frames


def _rewrite(graph: gs.Graph, mean: gs.Node, dq: gs.Node, q: gs.Node, frames: bool, *,
             opset: int, names: Names, done: Rewrites) -> None:
    x, y = mean.inputs[0], mean.outputs[0]
    add = _Adder(graph, names, done, mean.name)
    shape = ([1] if frames else []) + static_shape(x)
    axes = ([0] if frames else []) + list(range(len(shape), 4))
    view = gs.Variable(names.fresh(f"{x.name}_4d"), dtype=x.dtype,
                       shape=shape + [1] * (4 - len(shape)))
    if frames:  # the batch changes: an Unsqueeze (expand_dims), as the lift's own
        unsqueeze = axes_node("Unsqueeze", add.name("unsqueeze"), x, view, axes, opset, names)
        graph.nodes.append(unsqueeze)
        done.derived[unsqueeze.name] = mean.name
    else:  # the batch kept: a Reshape, which the int8 reshape layer takes between the pairs
        target = gs.Constant(names.fresh(f"{mean.name}_view"),
                             np.array(static_shape(view), np.int64))
        add.node("Reshape", [x, target], out=view)
    if frames:
        lift(mean, opset, names)  # axis 0 -> 1, as the lift moves a reduction's axes
    axis = reduced_axes(mean)[0]
    keep = int(mean.attrs.get("keepdims", 1))
    dims = static_shape(view)
    reduced = dims[:axis] + ([1] if keep else []) + dims[axis + 1:]
    mean.inputs[0] = add.pair(view, dq.inputs[1:])
    lifted = gs.Variable(names.fresh(f"{y.name}_4d"), dtype=y.dtype, shape=reduced)
    mean.outputs[0] = lifted
    back = add.pair(lifted, q.inputs[1:])
    target = gs.Constant(names.fresh(f"{mean.name}_shape"), np.array(static_shape(y), np.int64))
    add.node("Reshape", [back, target], out=y)
    done.rewritten[mean.name] = _FRAMES if frames else _VIEW


class _Adder(DerivedNodes):
    """Adds the nodes around the mean, each derived from it."""

    def __init__(self, graph: gs.Graph, names: Names, done: Rewrites, served: str) -> None:
        super().__init__(graph, names, done, served, suffix="_4d")

    def name(self, tag: str) -> str:
        return self.names.fresh(f"{self.served}_{tag}_4d")

    def pair(self, x: gs.Tensor, params: List[gs.Tensor]) -> gs.Tensor:
        """``DQ(Q(x))`` at the scale and zero point ``params``: exact on their grid."""
        zero = params[1] if len(params) > 1 and params[1].name else None
        ints = gs.Variable(self.names.fresh(f"{x.name}_q"),
                           dtype=const_value(zero).dtype if zero is not None else np.uint8,
                           shape=static_shape(x))
        qin = [x, params[0]] + ([zero] if zero is not None else [])
        self.node("QuantizeLinear", qin, out=ints)
        out = gs.Variable(self.names.fresh(f"{x.name}_dq"), dtype=x.dtype, shape=static_shape(x))
        return self.node("DequantizeLinear", [ints] + qin[1:], out=out)
