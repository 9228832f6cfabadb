"""Exact rewrites that move a Concat the accelerator does not take past the layers after it.

An ultralytics detection head (YOLOv8, YOLO11), as exported, joins its scales on the anchor
axis first, ``Concat(axis=2)`` of ``[B, C, H_i*W_i]``, then splits the channels into box and
class, runs the DFL (Reshape, Transpose, Softmax, 1x1 Conv, Reshape) on the box part and a
Sigmoid on the class part. The newer codegen's Concat takes 4-D tensors on the channel axis
only, and its Split only 2-D and 4-D ones, so the Concat and the Split were cut to CPU and the
DFL became a second Mrvl subgraph.

- **Sinking.** A Concat of activations on any axis but the channel axis of 4-D tensors moves
  past every reader that computes each position of that axis from the same position alone; a
  copy of the reader runs on each input of the Concat, and the Concat is written after it (one
  per output), in front of the first value with a reader of any other kind or that is a model
  output. The axis is followed through the readers it moves past:

  - elementwise ops of one activation (Sigmoid, Relu, Tanh, ...; Clip with constant bounds;
    a QuantizeLinear or DequantizeLinear with one scale and zero point, so an int8 head too);
  - Split on another axis;
  - Transpose (the axis goes where the permutation puts it);
  - Softmax and LogSoftmax on another axis (before opset 13 only on the last axis: they
    normalize over every axis from theirs to the last), so also the Transpose, Softmax,
    Transpose that exporters write for a Softmax on another axis before opset 13;
  - Reshape that keeps the axis: the same length, with the same product of the axes before it;
  - Conv with a 1x1 kernel, stride 1 and no padding, when the axis is H or W; its weight and
    bias constants, or DequantizeLinears of constants (an int8 model's weights: each copy of
    the Conv gets a copy of them, so every int8 Conv reads a DequantizeLinear of its own).

- **A Split of a Concat.** ``Split(axis=k)`` of a Reshape that only merges the axes after k
  of a ``Concat(axis=k)`` whose pieces the Split's are becomes the Reshapes of the Concat's
  inputs. After sinking, each scale's copy of the head's Split is one. In an int8 model the
  QDQ pairs before and after the Reshape (per tensor) are copied onto each piece with it: a
  pair is elementwise, so it commutes with the Concat, the Reshape and the Split.

Exact: every copy computes the same elements from the same elements, and the moved Concat and
the Split that undoes a Concat copy elements. Softmax and the 1x1 Conv sum over another axis,
in the order onnxruntime's kernel takes for one position, as before; the tests compare the
outputs bit for bit (``tests/frontend/test_concat_sinking.py``).

The first copy of a reader keeps its name, and the first moved Concat its Concat's; both are
listed in ``rewritten``, the other copies and Concats in ``derived``.
"""
from __future__ import annotations

import math
from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, is_const, present, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

_ELEMENTWISE = frozenset({"Sigmoid", "Relu", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish",
                          "Elu", "Exp", "Identity", "Clip"})


def sink_concats(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Apply both rewrites to ``graph`` in place, recording them in ``done``; True when one
    happened (the caller then cleans up and sorts the graph)."""
    names, moved = Names(graph), False
    for node in list(graph.nodes):
        axis = _joined_axis(node)
        if axis is not None and _movable(graph, node.outputs[0], axis, opset) \
                and not (axis and _qdq_only(graph, node.outputs[0], axis, opset)):
            _sink(graph, node, axis, opset, done, names)
            moved = True
    for node in list(graph.nodes):
        if node.op == "Split" and node.outputs:
            moved = _undo_concat(graph, node, done, names) or moved
    return moved


def _joined_axis(concat: gs.Node) -> Optional[int]:
    """The axis of a Concat of activations the accelerator does not take (every Concat but
    one on the channel axis of 4-D tensors), or None."""
    if concat.op != "Concat" or not concat.outputs or len(concat.inputs) < 2:
        return None
    shape = static_shape(concat.outputs[0])
    if shape is None or len(shape) < 2 or attr(concat, "axis") is None:
        return None
    axis = attr(concat, "axis") % len(shape)
    if (len(shape), axis) == (4, 1):
        return None
    if any(is_const(p) or static_shape(p) is None for p in concat.inputs):
        return None
    return axis


def _movable(graph: gs.Graph, value: gs.Tensor, axis: int, opset: int) -> bool:
    """Every reader of ``value`` computes each position of ``axis`` from that position alone
    (``_next_axis``), and ``value`` is not a model output."""
    shape = static_shape(value)
    if shape is None or not value.outputs or any(value is out for out in graph.outputs):
        return False
    return all(sum(t is value for t in reader.inputs) == 1 and reader.inputs[0] is value
               and all(static_shape(o) is not None for o in reader.outputs)
               and _next_axis(reader, shape, axis, opset) is not None
               for reader in value.outputs)


def _qdq_only(graph: gs.Graph, value: gs.Tensor, axis: int, opset: int) -> bool:
    """Sinking would move the Concat past per-tensor QuantizeLinear / DequantizeLinear pairs
    alone: nothing gained for a Concat on a non-leading axis (a layer on its 4-D views,
    concat_views.py), and an int8 layer reading the pair (an FC after the Concat) would lose
    its dequantized input. (On axis 0, sunk, the picks of pick_forms.py read its inputs.)"""
    readers = list(value.outputs)
    return all(r.op in ("QuantizeLinear", "DequantizeLinear") for r in readers) and all(
        not _movable(graph, out, axis, opset) or _qdq_only(graph, out, axis, opset)
        for r in readers for out in r.outputs)


def _next_axis(reader: gs.Node, shape: List[int], axis: int, opset: int) -> Optional[int]:
    """Where ``axis`` of ``reader``'s input is in its outputs when the reader computes each of
    its positions from the same position alone; None otherwise."""
    rank, op = len(shape), reader.op
    if op in ("QuantizeLinear", "DequantizeLinear"):  # per tensor: elementwise
        return axis if _per_tensor(reader) else None
    if op in _ELEMENTWISE:
        simple = all(is_const(t) or present(reader, k) is None
                     for k, t in enumerate(reader.inputs) if k > 0)
        return axis if simple else None
    if op == "Split":
        return axis if attr(reader, "axis", 0) % rank != axis else None
    if op == "Transpose":
        perm = list(attr(reader, "perm") or range(rank - 1, -1, -1))
        return perm.index(axis)
    if op in ("Softmax", "LogSoftmax"):
        # Before opset 13 they normalize over every axis from theirs to the last.
        over = attr(reader, "axis", -1 if opset >= 13 else 1) % rank
        return axis if over != axis and (opset >= 13 or over == rank - 1) else None
    if op == "Reshape":
        return _reshaped_axis(reader, shape, axis)
    if op == "Conv":
        return axis if rank == 4 and axis in (2, 3) and _pointwise_conv(reader) else None
    return None


def _reshaped_axis(reshape: gs.Node, shape: List[int], axis: int) -> Optional[int]:
    """The output axis holding ``axis`` unchanged: the same length, with the same product of
    the axes before it (so also after it); the row-major order then maps the axes before and
    after it as they are, whatever its length."""
    out = static_shape(reshape.outputs[0])
    if out is None or not is_const(reshape.inputs[1]):
        return None
    before = math.prod(shape[:axis])
    return next((j for j in range(len(out))
                 if out[j] == shape[axis] and math.prod(out[:j]) == before), None)


def _pointwise_conv(conv: gs.Node) -> bool:
    weight = conv.inputs[1] if len(conv.inputs) > 1 else None
    bias = present(conv, 2)
    return (_fixed(weight) and static_shape(weight) is not None and len(weight.shape) == 4
            and list(weight.shape[2:]) == [1, 1] and (bias is None or _fixed(bias))
            and all(s == 1 for s in attr(conv, "strides", [1, 1]))
            and all(p == 0 for p in attr(conv, "pads", [0, 0, 0, 0]))
            and attr(conv, "auto_pad", "NOTSET") in ("NOTSET", "VALID", b"NOTSET", b"VALID"))


def _fixed(tensor: Optional[gs.Tensor]) -> bool:
    """A constant, or the DequantizeLinear of constants (a QDQ model's weight)."""
    return is_const(tensor) or _dequantized_constant(tensor) is not None


def _dequantized_constant(tensor: Optional[gs.Tensor]) -> Optional[gs.Node]:
    writer = tensor.inputs[0] if tensor is not None and len(tensor.inputs) == 1 else None
    if writer is None or writer.op != "DequantizeLinear" \
            or not all(is_const(t) for t in writer.inputs):
        return None
    return writer


def _own_weights(graph: gs.Graph, inputs: List[gs.Tensor], copy: str, names: Names,
                 done: Rewrites) -> List[gs.Tensor]:
    """``inputs`` with each DequantizeLinear of constants copied for the reader ``copy``
    (the rules take a weight's DequantizeLinear into the layer that reads it alone)."""
    own = list(inputs)
    for i, tensor in enumerate(inputs):
        writer = _dequantized_constant(tensor)
        if writer is None:
            continue
        own[i] = gs.Variable(names.fresh(f"{tensor.name}_for_{copy}"), tensor.dtype,
                             tensor.shape)
        name = names.fresh(f"{writer.name}_for_{copy}")
        graph.nodes.append(gs.Node(writer.op, name, dict(writer.attrs), list(writer.inputs),
                                   [own[i]], domain=writer.domain))
        done.derived[name] = writer.name
    return own


def _sink(graph: gs.Graph, concat: gs.Node, axis: int, opset: int, done: Rewrites,
          names: Names) -> None:
    value, parts, origin = concat.outputs[0], list(concat.inputs), concat.name
    lengths = [static_shape(p)[axis] for p in parts]
    _detach(graph, concat)
    ends: List[gs.Node] = []
    _place(graph, value, parts, lengths, axis, opset, done, names, ends)
    for k, end in enumerate(ends):
        end.name = origin if k == 0 else names.fresh(f"{origin}_moved")
        if k:
            done.derived[end.name] = origin
    done.rewritten[origin] = ("moved past the layers after it that work position by position "
                              "on its axis (a copy of each per input)")


def _detach(graph: gs.Graph, node: gs.Node) -> None:
    node.inputs.clear()
    node.outputs.clear()
    graph.nodes.remove(node)


def _place(graph: gs.Graph, value: gs.Tensor, parts: List[gs.Tensor], lengths: List[int],
           axis: int, opset: int, done: Rewrites, names: Names, ends: List[gs.Node]) -> None:
    """Make ``value`` the concatenation of ``parts`` on ``axis``: by copies of its readers,
    one per part, when they allow it, otherwise by a Concat."""
    if not value.outputs and not any(value is out for out in graph.outputs):
        return  # read by nothing (a Split's unused piece): nothing to join
    if not _movable(graph, value, axis, opset):
        end = gs.Node("Concat", attrs={"axis": axis}, inputs=parts, outputs=[value])
        graph.nodes.append(end)
        ends.append(end)
        return
    for reader in list(value.outputs):
        op, attrs, name = reader.op, dict(reader.attrs), reader.name
        inputs, outputs = list(reader.inputs), list(reader.outputs)
        after = _next_axis(reader, static_shape(value), axis, opset)
        _detach(graph, reader)
        copies = []
        for k, (part, length) in enumerate(zip(parts, lengths)):
            outs = [gs.Variable(names.fresh(f"{o.name}_part{k}"), o.dtype,
                                _with(static_shape(o), after, length)) for o in outputs]
            ins = [part] + (inputs[1:] if k == 0 else _own_weights(
                graph, inputs[1:], f"{name}_part{k}", names, done))
            if op == "Reshape":
                ins[1] = gs.Constant(names.fresh(f"{name}_shape{k}"), np.array(
                    _with(static_shape(outputs[0]), after, length), np.int64))
            copy = gs.Node(op, name=name if k == 0 else names.fresh(f"{name}_part{k}"),
                           attrs=dict(attrs), inputs=ins, outputs=outs)
            graph.nodes.append(copy)
            copies.append(outs)
            if k:
                done.derived[copy.name] = name
        done.rewritten[name] = "one copy per input of a Concat moved past it"
        for slot, out in enumerate(outputs):
            _place(graph, out, [c[slot] for c in copies], lengths, after, opset, done, names,
                   ends)


def _with(shape: List[int], axis: int, length: int) -> List[int]:
    return shape[:axis] + [length] + shape[axis + 1:]


def _undo_concat(graph: gs.Graph, split: gs.Node, done: Rewrites, names: Names) -> bool:
    """``Split(axis=k)`` of ``Reshape(Concat(axis=k))``, the Reshape merging only axes after k
    and the pieces matching, per-tensor QuantizeLinear / DequantizeLinear pairs allowed before
    and after the Reshape (an int8 head): each output becomes the matching Concat input through
    a copy of that chain, the Reshape's shape the output's."""
    chain = _chain(split.inputs[0], graph.outputs)
    shape = static_shape(split.inputs[0])
    if chain is None or shape is None:
        return False
    axis = attr(split, "axis", 0) % len(shape)
    concat, inner = chain[0], static_shape(chain[0].outputs[0])
    if inner is None or inner[:axis + 1] != shape[:axis + 1] \
            or attr(concat, "axis") % len(inner) != axis:
        return False
    pieces, outputs = list(concat.inputs), list(split.outputs)
    if any(static_shape(t) is None for t in pieces + outputs) or len(pieces) != len(outputs) \
            or [static_shape(p)[axis] for p in pieces] != [static_shape(o)[axis]
                                                            for o in outputs]:
        return False
    name, origin = split.name, done.derived.pop(split.name, None)
    steps = [(n.name, n.op, dict(n.attrs), list(n.inputs[1:]), n.outputs[0].dtype)
             for n in chain[1:]]
    for node in chain[1:] + [split]:
        _detach(graph, node)
    for k, (piece, out) in enumerate(zip(pieces, outputs)):
        value = piece
        for j, (step, op, attrs, extra, dtype) in enumerate(steps):
            if op == "Reshape":
                extra = [gs.Constant(names.fresh(f"{name}_shape{k}"),
                                     np.array(static_shape(out), np.int64))]
                step = name  # the Split's name: the Reshape is what it became
            result = out if j == len(steps) - 1 else gs.Variable(
                names.fresh(f"{out.name}_step{j}"), dtype,
                static_shape(out) if _reshaped_before(steps, j) else static_shape(piece))
            node = gs.Node(op, name=step if k == 0 else names.fresh(f"{step}_piece{k}"),
                           attrs=dict(attrs), inputs=[value] + extra, outputs=[result])
            graph.nodes.append(node)
            if op == "Reshape" and (k or origin is not None):
                done.derived[node.name] = origin or name
            elif op != "Reshape" and k:
                done.derived[node.name] = step
            value = result
    undone = "its outputs are the inputs of the Concat it splits again, reshaped"
    before = done.rewritten.get(origin or name)
    if not before or undone not in before:
        done.rewritten[origin or name] = f"{before}; {undone}" if before else undone
    for merged in (concat, next(n for n in chain if n.op == "Reshape")):
        done.merged[merged.name] = name  # read by nothing else now: what it did is done here
    return True


def _reshaped_before(steps: List[tuple], j: int) -> bool:
    return any(step[1] == "Reshape" for step in steps[:j + 1])


def _chain(value: gs.Tensor, graph_outputs: List[gs.Tensor]) -> Optional[List[gs.Node]]:
    """The Concat, then the nodes from it to ``value``: one Reshape of a constant shape and any
    per-tensor QuantizeLinear / DequantizeLinear around it, each value read by the next alone."""
    chain: List[gs.Node] = []
    while len(value.outputs) == 1 and value.inputs \
            and not any(value is out for out in graph_outputs):
        node = value.inputs[0]
        chain.insert(0, node)
        if node.op == "Concat":
            reshapes = [n for n in chain if n.op == "Reshape"]
            return chain if len(reshapes) == 1 else None
        if not (node.op == "Reshape" and is_const(node.inputs[1]) or _per_tensor(node)):
            return None
        value = node.inputs[0]
    return None


def _per_tensor(node: gs.Node) -> bool:
    """A QuantizeLinear or DequantizeLinear of one constant scale and zero point."""
    return node.op in ("QuantizeLinear", "DequantizeLinear") and all(
        is_const(t) and t.values.size == 1 for t in node.inputs[1:])
