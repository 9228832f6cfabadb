"""An int8 per-step head on ``[T, 1, C]`` (a CRNN's, modelA_paper's) as one on ``[T, C]``.

A QDQ model's head after an unrolled cell reads its steps as ``[T, 1, C]``: a QuantizeLinear, a
DequantizeLinear, a MatMul by a dequantized int8 weight ``[C, O]``, a QuantizeLinear and a
DequantizeLinear of the product ``[T, 1, O]``. ``sequence_lift.py`` would lift that to
``[1, T, 1, C]``, which no int8 FC takes (``mrvl.qnn_fc_tokens`` takes ``[1, T, C]``), so the
head stayed at batch T and the model did not fit one device.

Rewrite: the pair and the MatMul run on ``[T, C]``: a Reshape ``[T, 1, C] -> [T, C]`` before
the QuantizeLinear; the product's Q/DQ pair and the per-row tail after it (per-tensor Q/DQ
pairs, an Add / Sub / Mul of a (dequantized) constant of rank <= 1: a bias) on ``[T, O]``; a
Reshape ``[T, O] -> [T, 1, O]`` where the rows end (a tensor read by another op, or a graph
output), under that tensor's name. ``step_heads.py`` then remakes the ``[T, C]`` tensor from
the joined steps (a view of it) and ``sequence_lift.py`` lifts the head to ``[1, T, C]``: one
int8 FC at batch 1, its int8 bias Add on ``[1, T, O]``; what reads the rows' end (a Softmax)
lifts on the 4-D view, as in fp16.

Requires: ``tensor`` of static shape ``[T, 1, C]`` (T > 1) in ``graph``.
Ensures: each head rewritten as above (its QuantizeLinear read only by DequantizeLinears, each
read only by MatMuls by a dequantized 2-D constant with one scale, each product read only by
QuantizeLinears, all with one scale and zero point); every other tensor keeps its name, shape
and values; each added node is in ``done.derived`` with the node it serves.

Exact: a Reshape only copies; a per-tensor QuantizeLinear / DequantizeLinear is elementwise, and
an operand of rank <= 1 broadcasts over the last axis alike in both shapes, so they commute
with it; the MatMul computes each row ``x_t W`` from the same C products in both shapes. The
one bound: were onnxruntime to add those products in another order for the other shape, two
float32 sums of C terms are at most ``2 (C - 1) u sum |x w|`` apart (u = 2**-24); on the
inputs of the tests (powers-of-two scales, int8-grid inputs) every sum is exact.
``tests/frontend/test_int8_step_rows.py`` runs the model before and after on onnxruntime and
compares bit for bit.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


def flatten_int8_heads(graph: gs.Graph, tensor: gs.Tensor, names: Names,
                       done: Rewrites) -> Optional[gs.Tensor]:
    """Move each int8 head reading ``tensor`` ``[T, 1, C]`` to ``[T, C]`` (see the module
    docstring); the ``[T, C]`` view it reads now, or None when there was none."""
    shape = static_shape(tensor)
    if not shape or len(shape) != 3 or shape[0] <= 1 or shape[1] != 1:
        return None
    quants = [q for q in tensor.outputs if _int8_head(q)]
    if not quants:
        return None
    rows = gs.Variable(names.fresh(f"{tensor.name}_rows"), tensor.dtype, [shape[0], shape[2]])
    view = _reshape(tensor, rows, names, quants[0].name)
    maker = tensor.inputs[0] if tensor.inputs else None
    at = next((i + 1 for i, n in enumerate(graph.nodes) if n is maker), 0)
    graph.nodes.insert(at, view)  # before every reader: the graph stays sorted
    done.derived[view.name] = quants[0].name
    for quant in quants:
        quant.inputs[0] = rows
        _flatten_head(graph, quant, names, done)
    return rows


def _one_scale(node: gs.Node) -> bool:
    return all(is_const(t) and np.asarray(t.values).size == 1 for t in node.inputs[1:] if t.name)


def _weight(tensor: gs.Tensor) -> bool:
    """A 2-D constant dequantized with one scale (an int8 FC's weight)."""
    maker = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    return maker is not None and maker.op == "DequantizeLinear" and is_const(maker.inputs[0]) \
        and np.asarray(maker.inputs[0].values).ndim == 2 and _one_scale(maker)


def _readers(tensor: gs.Tensor, op: str) -> List[gs.Node]:
    """``tensor``'s readers when they are all ``op`` nodes with one scale (else none)."""
    readers = list(tensor.outputs)
    ok = readers and tensor.name and all(r.op == op and _one_scale(r) for r in readers)
    return readers if ok else []


def _int8_head(quant: gs.Node) -> bool:
    if quant.op != "QuantizeLinear" or not _one_scale(quant):
        return False
    dequants = _readers(quant.outputs[0], "DequantizeLinear")
    matmuls = [m for d in dequants for m in d.outputs[0].outputs]
    return bool(dequants) and bool(matmuls) and all(
        m.op == "MatMul" and m.inputs[0] is d.outputs[0] and _weight(m.inputs[1])
        and _readers(m.outputs[0], "QuantizeLinear")
        and all(_readers(q.outputs[0], "DequantizeLinear") for q in m.outputs[0].outputs)
        for d in dequants for m in d.outputs[0].outputs)


def _flatten_head(graph: gs.Graph, quant: gs.Node, names: Names, done: Rewrites) -> None:
    """The head after ``quant`` (which reads the ``[T, C]`` view now) on ``[T, ...]`` rows, and
    its per-row tail (``_per_row``) with it; each ``[T, 1, O]`` tensor the rows end at comes
    back by a Reshape."""
    rows = static_shape(quant.inputs[0])[0]
    outputs = {t.name for t in graph.outputs}
    _set_shape(quant.outputs[0], static_shape(quant.inputs[0]))
    for dequant in quant.outputs[0].outputs:
        _set_shape(dequant.outputs[0], static_shape(quant.inputs[0]))
        for matmul in dequant.outputs[0].outputs:
            width = static_shape(matmul.inputs[1])[1]
            _set_shape(matmul.outputs[0], [rows, width])
            for out_q in matmul.outputs[0].outputs:
                _set_shape(out_q.outputs[0], [rows, width])
                for out_dq in list(out_q.outputs[0].outputs):
                    _carry(graph, out_dq, [rows, width], outputs, names, done)
            done.rewritten[matmul.name] = ("an int8 per-step head on [T, 1, C] run on [T, C] "
                                           "(an int8 FC at batch 1 once lifted)")


def _carry(graph: gs.Graph, start: gs.Node, shape: List[int], outputs: set, names: Names,
           done: Rewrites) -> None:
    """The rows go on from ``start``'s output through readers that compute each row alone; a
    tensor read otherwise (or a graph output) is written back by a Reshape under its name."""
    frontier = [start]
    while frontier:
        node = frontier.pop()
        out = node.outputs[0]
        if out.name in outputs or not out.outputs or not all(_per_row(r, out)
                                                              for r in out.outputs):
            _unflatten(graph, node, shape, names, done)
            continue
        _set_shape(out, shape)
        frontier.extend(out.outputs)


def _per_row(node: gs.Node, tensor: gs.Tensor) -> bool:
    """``node`` computes each row of ``tensor`` alone, the same on ``[T, O]`` as on
    ``[T, 1, O]``: a per-tensor DequantizeLinear, a per-tensor QuantizeLinear read by such
    DequantizeLinears only (the rows end on a float tensor), an Add, Sub or Mul of a constant
    (or dequantized constant) of rank <= 1 (it broadcasts over the last axis in both)."""
    if node.op in ("QuantizeLinear", "DequantizeLinear"):
        return node.inputs[0] is tensor and _one_scale(node) and (
            node.op == "DequantizeLinear" or bool(_readers(node.outputs[0], "DequantizeLinear")))
    others = [t for t in node.inputs if t is not tensor]
    return node.op in ("Add", "Sub", "Mul") and len(others) == 1 and len(node.inputs) == 2 \
        and (is_const(others[0]) or _dequantized(others[0])) \
        and len(static_shape(others[0]) or [0, 0]) <= 1


def _dequantized(tensor: gs.Tensor) -> bool:
    maker = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    return maker is not None and maker.op == "DequantizeLinear" and all(
        is_const(t) for t in maker.inputs if t.name)


def _unflatten(graph: gs.Graph, node: gs.Node, shape: List[int], names: Names,
               done: Rewrites) -> None:
    out = node.outputs[0]
    flat = gs.Variable(names.fresh(f"{out.name}_rows"), out.dtype, shape)
    node.outputs[0] = flat
    at = next(i for i, n in enumerate(graph.nodes) if n is node)
    back = _reshape(flat, out, names, node.name)
    graph.nodes.insert(at + 1, back)
    done.derived[back.name] = node.name


def _reshape(x: gs.Tensor, out: gs.Tensor, names: Names, tag: str) -> gs.Node:
    target = gs.Constant(names.fresh(f"{tag}_rows_shape"), np.asarray(out.shape, np.int64))
    return gs.Node("Reshape", names.fresh(f"{tag}_rows"), inputs=[x, target], outputs=[out])


def _set_shape(tensor: gs.Tensor, shape: List[int]) -> None:
    tensor.shape = list(shape)
