"""Token-tensor ops as jax2tf and torch write them, rewritten into forms the layer set takes.

Requires: a graph whose activations' shapes are static (canonicalize runs this after the shapes
that depended on folded values are known).
Ensures: each rewrite below is done where it applies and recorded in ``done`` (a rewritten
node keeps its name; added nodes are in ``derived``; a node dropped into its readers is in
``merged``); elsewhere the graph is as it was.

- ``Expand`` of an activation (any rank) to a constant shape: each reader that broadcasts its
  operands numpy-style (Add, Sub, Mul, Div, Pow, Max, Min, Sum, Mean, Where, the comparisons and
  logical ops) and whose other operands span every axis the Expand widened reads the Expand's
  input instead (``jnp.broadcast_to`` before a Sub, as jax2tf writes flax's LayerNorm; a byte
  model's mask broadcast before a Where). Exact: broadcasting inside the reader reads the same
  values, and the reader's output shape is checked to be the one it had. A reader whose other
  operands do not span it (``Sub(Expand(m, s), m)``: the result would be ``m``'s shape) keeps
  reading the Expand, which stays while any such reader (or the graph's output) needs it.
- ``GlobalMaxPool`` of a rank-3 tensor ``[N, C, L]`` -> ``ReduceMax`` over axis 2 keeping it
  (the layer set's ReduceMax takes one axis of a 3-D tensor). Exact on every input without a
  NaN (a max selects); where a row holds a NaN, ReduceMax gives NaN while onnxruntime's
  GlobalMaxPool may skip it (its max keeps the larger of the two operands it compares).
- ``ReduceSum`` over one axis (not the batch axis 0; axes constant, any keepdims) of a float
  tensor of rank 2 to 4 -> ``MatMul`` by a constant ``ones [L, 1]`` (an FC over the last axis),
  the axis moved last by a ``Transpose`` before it and the sum moved back by the same
  ``Transpose`` after it when it is another axis, with ``Squeeze(axis)`` after it when keepdims
  is 0. The layer set has no sum layer; an FC of weight 1 sums in float32 and rounds once. The
  transposes move values without changing them. Exact in real arithmetic; in float32 only the
  order of the additions may differ, so the two results differ by at most
  ``2 (L - 1) u sum_l |x_l|`` (u = 2**-24); every product is exact (x * 1).
- ``BatchNormalization`` (inference) of a rank-3 tensor ``[N, C, L]`` (torch's BatchNorm1d over
  tokens) -> ``Unsqueeze(3)``, the same BatchNormalization on ``[N, C, L, 1]``, ``Squeeze(3)``:
  the 4-D view whose NHWC form ``[N, L, 1, C]`` is the token tensor ``[N, L, C]`` as it lies, so
  the per-channel affine maps to a depthwise 1x1 Conv2D (``mrvl.channel_affine``) and the
  transposes torch writes around it only relabel the data. Exact: the op computes each element
  by the same formula on either rank.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, is_const, reduce_axes, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, axes_node

# Ops whose every input broadcasts numpy-style to the output (multidirectional broadcasting).
_BROADCASTING = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where",
                 "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor")


def rewrite_token_ops(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Apply the rewrites to ``graph`` in place; True when one happened (the caller then cleans
    up and sorts the graph)."""
    names, before = Names(graph), (len(done.rewritten), len(done.merged))
    outputs = {t.name for t in graph.outputs}
    for node in list(graph.nodes):
        if not node.outputs:
            continue
        if node.op == "Expand":
            _expand(node, done, outputs)
        elif node.op == "GlobalMaxPool":
            _global_max_pool(graph, node, done, names, opset)
        elif node.op == "ReduceSum":
            _reduce_sum(graph, node, done, names, opset)
        elif node.op == "BatchNormalization":
            _batch_norm(graph, node, done, names, opset)
    return (len(done.rewritten), len(done.merged)) != before


def _floating(tensor: gs.Tensor) -> bool:
    return tensor.dtype is not None and np.issubdtype(np.dtype(tensor.dtype), np.floating)


def _expand(node: gs.Node, done: Rewrites, outputs: set) -> None:
    source, out = node.inputs[0], node.outputs[0]
    shape = static_shape(out)
    if is_const(source) or shape is None or len(node.inputs) < 2 \
            or not is_const(node.inputs[1]) or not out.outputs:
        return
    readers: List[gs.Node] = []
    for reader in out.outputs:  # a reader reading it twice is listed twice
        if all(reader is not r for r in readers) and _spans(reader, out, source):
            readers.append(reader)
    if not readers:
        return
    for reader in readers:
        for i, tensor in enumerate(reader.inputs):
            if tensor is out:
                reader.inputs[i] = source
    whole = not out.outputs and out.name not in outputs
    if whole:  # every reader broadcasts: the Expand is gone
        node.inputs.clear()
        node.outputs.clear()
        done.merged[node.name] = readers[0].name
    else:
        done.kept[node.name] = ("the Expand stays for its readers that do not broadcast it "
                                "to its own shape")
    for reader in readers:
        done.rewritten.setdefault(reader.name, f"reads {node.name}'s input directly: the "
                                               f"Expand to {shape} is the broadcast it does")


def _spans(reader: gs.Node, out: gs.Tensor, source: gs.Tensor) -> bool:
    """True when ``reader`` broadcasts its operands (numpy rules) and, reading ``source`` in
    place of the Expand's ``out``, still computes its own output shape: the other operands
    span every axis the Expand widened (``Sub(Expand(m, s), m)`` does not, and keeps it)."""
    if reader.op not in _BROADCASTING or not reader.outputs:
        return False
    result = static_shape(reader.outputs[0])
    shapes = [static_shape(source if t is out else t) for t in reader.inputs]
    if result is None or not shapes or any(s is None for s in shapes):
        return False
    try:
        return list(np.broadcast_shapes(*[tuple(s) for s in shapes])) == result
    except ValueError:
        return False


def _global_max_pool(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names,
                     opset: int) -> None:
    shape = static_shape(node.inputs[0])
    if shape is None or len(shape) != 3:
        return
    node.op = "ReduceMax"
    node.attrs.clear()
    if opset >= 18:  # ReduceMax takes its axes as an input from opset 18
        node.inputs.append(gs.Constant(names.fresh(f"{node.name}_axes"), np.array([2], np.int64)))
    else:
        node.attrs["axes"] = [2]
    node.attrs["keepdims"] = 1
    done.rewritten[node.name] = "GlobalMaxPool of a 3-D [N, C, L] became ReduceMax over axis 2"


def _reduce_sum(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names,
                opset: int) -> None:
    x = node.inputs[0]
    shape = static_shape(x)
    axes = reduce_axes(node)
    if is_const(x) or shape is None or not 2 <= len(shape) <= 4 or not _floating(x) \
            or axes is None or len(axes) != 1 or axes[0] == 0 or len(node.outputs) != 1:
        return
    axis, out, last = axes[0], node.outputs[0], len(shape) - 1
    length, kept = shape[axis], shape[:axis] + [1] + shape[axis + 1:]
    swap = list(range(len(shape)))
    swap[axis], swap[last] = last, axis  # its own inverse
    where = "the last axis" if axis == last else f"axis {axis}"
    what = f"ReduceSum over {where} ({length}) became MatMul by ones [{length}, 1]"
    target = out
    if not int(attr(node, "keepdims", 1)):
        target = gs.Variable(names.fresh(f"{out.name}_kept"), dtype=out.dtype, shape=kept)
        squeeze = axes_node("Squeeze", names.fresh(f"{node.name}_squeeze"), target, out, [axis],
                             opset, names)
        graph.nodes.append(squeeze)
        done.derived[squeeze.name] = node.name
    node.op = "MatMul"
    node.attrs.clear()
    node.inputs.clear()
    ones = gs.Constant(names.fresh(f"{node.name}_ones"), np.ones((length, 1), np.dtype(x.dtype)))
    if axis == last:
        node.inputs.extend([x, ones])
        node.outputs[0] = target
    else:  # the summed axis moved last and the sum moved back to where the axis was
        moved = [shape[i] for i in swap]
        node.inputs.extend([_transpose(graph, node, x, swap, moved, names, done), ones])
        summed = gs.Variable(names.fresh(f"{out.name}_summed"), dtype=out.dtype,
                             shape=moved[:-1] + [1])
        node.outputs[0] = summed
        _transpose(graph, node, summed, swap, kept, names, done, target)
        what = f"Transpose, {what}, Transpose back"
    if target is not out:
        what += f" and Squeeze of axis {axis}"
    done.rewritten[node.name] = what + ": float32 sums in another order, at most " \
                                       "2 (L - 1) 2**-24 sum |x| apart"


def _transpose(graph: gs.Graph, node: gs.Node, x: gs.Tensor, perm: List[int],
               shape: List[int], names: Names, done: Rewrites,
               y: Optional[gs.Tensor] = None) -> gs.Tensor:
    """A Transpose of ``x`` by ``perm`` into ``y`` (a new tensor of ``shape`` when None), derived
    from ``node``; returns ``y``."""
    if y is None:
        y = gs.Variable(names.fresh(f"{x.name}_t"), dtype=x.dtype, shape=shape)
    transpose = gs.Node("Transpose", names.fresh(f"{node.name}_transpose"),
                        attrs={"perm": perm}, inputs=[x], outputs=[y])
    graph.nodes.append(transpose)
    done.derived[transpose.name] = node.name
    return y


def _batch_norm(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names,
                opset: int) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = static_shape(x)
    if shape is None or len(shape) != 3 or len(node.outputs) != 1 or is_const(x) \
            or not all(is_const(t) for t in node.inputs[1:5]):
        return
    view = shape + [1]
    image = gs.Variable(names.fresh(f"{node.name}_image"), dtype=x.dtype, shape=view)
    normed = gs.Variable(names.fresh(f"{node.name}_normed"), dtype=out.dtype, shape=view)
    unsqueeze = axes_node("Unsqueeze", names.fresh(f"{node.name}_unsqueeze"), x, image, [3],
                          opset, names)
    node.inputs[0] = image
    node.outputs[0] = normed
    squeeze = axes_node("Squeeze", names.fresh(f"{node.name}_squeeze"), normed, out, [3], opset,
                        names)
    graph.nodes.extend([unsqueeze, squeeze])
    done.derived[unsqueeze.name] = node.name
    done.derived[squeeze.name] = node.name
    done.rewritten[node.name] = ("BatchNormalization of a 3-D [N, C, L] computes on its 4-D "
                                 "view [N, C, L, 1] (Unsqueeze before, Squeeze after)")

