"""A float view quantized only after it: the QDQ pair copied before the view.

onnxruntime's quantize_static treats a Squeeze, Flatten or Reshape as a view that shares its
input's scale and may leave the pair before it out: a Keras classifier's head in our recipe's
QDQ model (vietcombank_captcha) reads ``GlobalAveragePool -> Squeeze -> Q -> DQ -> MatMul``.
No int8 rule takes that form: the pool has no QuantizeLinear after it, the view no
DequantizeLinear before it, and ``rank_lift`` (lifting the lone pair to ``[N, C, 1, 1]``)
then leaves a Squeeze between the FC and its input pair, so the FC stayed on CPU ("the weights
are not constant"). Here the view's pair is copied before it, and a Squeeze (which no int8
rule takes) is written as the Reshape to its output shape:

    X -> view -> Q -> DQ      becomes      X -> Q' -> DQ' -> Reshape|Flatten -> Q -> DQ

so the producer ends in its own pair (``DQ -> GlobalAveragePool -> Q'``: the int8 pool), the
view is the int8 reshape between same-scale pairs, and the FC reads its pair directly.

Requires: static shapes; constant per-tensor Q/DQ parameters (``core.qdq_grid.grid``).
Ensures: every float view (Squeeze, Flatten, constant-shape Reshape) keeping a batch axis of 1
whose one reader is a per-tensor QuantizeLinear whose DequantizeLinears only MatMuls or Gemms
read, as their data input (an FC's input pair), whose output is no model output and whose
input is no DequantizeLinear's output, reads a QuantizeLinear -> DequantizeLinear copy of that
pair; a Squeeze among them is the Reshape to its output shape. The view keeps its name
(``rewritten``); the copies are ``derived`` from it.

Exact: a per-tensor QuantizeLinear is the same function of every element, so it commutes with
a view: ``Q(view(x)) = view(Q(x))``; and ``Q(DQ(q)) = q`` for the same parameters
(``qdq_steps``: ``(q - z) s / s`` rounds back to the integer), so the pair's integers, and so
every tensor after it, are bit-equal. A Reshape to a Squeeze's static output shape moves the
same elements in the same order.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import is_const, static_shape
from mrvl_convert.core.qdq_grid import grid
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

_VIEWS = ("Squeeze", "Flatten", "Reshape")


def pair_views(graph: gs.Graph, done: Rewrites) -> bool:
    """Copy each quantized view's pair before it (module docstring); True when one was."""
    names, outputs, changed = Names(graph), {id(t) for t in graph.outputs}, False
    for node in list(graph.nodes):
        quantize = _quantized_view(node, outputs)
        if quantize is not None:
            _pair_before(graph, node, quantize, names, done)
            changed = True
    return changed


def _quantized_view(node: gs.Node, outputs: set) -> Optional[gs.Node]:
    """The per-tensor QuantizeLinear that alone reads ``node``, a float view keeping the
    batch axis of a tensor no DequantizeLinear wrote, or None."""
    if node.op not in _VIEWS or len(node.outputs) != 1 or id(node.outputs[0]) in outputs:
        return None
    x, y = node.inputs[0], node.outputs[0]
    readers, before = y.outputs, x.inputs[0] if x.inputs else None
    if len(readers) != 1 or readers[0].op != "QuantizeLinear" or grid(readers[0]) is None \
            or before is None or before.op in ("DequantizeLinear", "QuantizeLinear") \
            or not _fc_input(readers[0]):
        return None
    shape, out = static_shape(x), static_shape(y)
    # Axis 0 of 1 only: a time-major [T, ...] view before a pair (an unrolled cell's per-step
    # head) is the frame lift's form (sequence_lift / int8_step_rows make it batch 1 there).
    if shape is None or out is None or not shape or not out or shape[0] != out[0] \
            or shape[0] != 1 or x.dtype is None or not np.issubdtype(np.dtype(x.dtype), np.floating):
        return None
    if node.op == "Reshape" and not is_const(node.inputs[1]):
        return None
    return readers[0]


def _fc_input(quantize: gs.Node) -> bool:
    """The pair is what FCs read: every DequantizeLinear of it is the data input of a MatMul
    or Gemm (other views before a pair, e.g. a frame lift's, are other passes' forms)."""
    dqs = quantize.outputs[0].outputs
    return bool(dqs) and all(
        dq.op == "DequantizeLinear" and dq.outputs[0].outputs and all(
            r.op in ("MatMul", "Gemm") and r.inputs[0] is dq.outputs[0]
            for r in dq.outputs[0].outputs) for dq in dqs)


def _pair_before(graph: gs.Graph, view: gs.Node, quantize: gs.Node, names: Names,
                 done: Rewrites) -> None:
    x, shape = view.inputs[0], static_shape(view.inputs[0])
    params = list(quantize.inputs[1:])
    q = gs.Variable(names.fresh(f"{x.name}_quantized"), dtype=quantize.outputs[0].dtype,
                    shape=shape)
    dq = gs.Variable(names.fresh(f"{x.name}_dequantized"), dtype=x.dtype, shape=shape)
    for op, source, out in (("QuantizeLinear", x, q), ("DequantizeLinear", q, dq)):
        name = names.fresh(f"{view.name}_{op}")
        graph.nodes.append(gs.Node(op, name, attrs=dict(quantize.attrs),
                                   inputs=[source, *params], outputs=[out]))
        done.derived[name] = view.name
    view.inputs[0] = dq
    what = "reads a copy of the QDQ pair after it (exact)"
    if view.op == "Squeeze":
        _as_reshape(view, names)
        what = f"a Reshape to {static_shape(view.outputs[0])}; {what}"
    done.rewritten[view.name] = what


def _as_reshape(view: gs.Node, names: Names) -> None:
    """The Squeeze as the Reshape to its static output shape (same elements, same order)."""
    target = np.array(static_shape(view.outputs[0]), np.int64)
    data = view.inputs[0]
    view.op, view.attrs = "Reshape", {}
    view.inputs.clear()
    view.inputs.extend([data, gs.Constant(names.fresh(f"{view.name}_shape"), target)])

