"""A global max pool as keras2onnx writes it, made the GlobalMaxPool the layers take.

keras's ``GlobalMaxPooling2D`` on a channels-last model reaches ONNX as
``ReduceMax(Transpose(x, perm=[0, 2, 3, 1]), axes=[1, 2], keepdims=0)`` of an NCHW ``x`` (the
converter's pushed-down transpose); torch's ``x.amax((2, 3))`` as ``ReduceMax(x, axes=[2, 3])``.
The layer set's ReduceMax takes one axis of a 3-D tensor, its GlobalMaxPool2D a 4-D one.

Requires: a graph whose activations' shapes are static.
Ensures: every such ReduceMax of a 4-D float ``x`` keeps its name and becomes ``GlobalMaxPool(x)``
(``[N, C, 1, 1]``, listed in ``rewritten``), followed where it dropped the axes by a new
``Flatten(axis=1)`` (in ``derived``) writing its former output ``[N, C]``; the Transpose stays
only for its other readers. Exact on every input without a NaN (a max selects one of the values,
and ``[N, H, W, C]`` reduced over H and W is ``[N, C]`` in the same order); where a window holds a
NaN the two may differ, as ``token_ops.py``'s GlobalMaxPool and ReduceMax do.

In an int8 QDQ model the keras form holds the Transpose's pair, ``ReduceMax(DQ(Q(Transpose(x))))``
(speechmos's DNSMOS): the pool reads a copy of that pair on ``x`` (one scale and zero point each,
elementwise, so exact: the same values in NCHW order), which is ``derived`` from the pair.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, reduce_axes, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.global_means import flatten_after

_NHWC = [0, 2, 3, 1]


def rewrite_global_max(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every global ReduceMax in place; True when one was (the caller then cleans up
    and sorts the graph)."""
    names, before = Names(graph), len(done.rewritten)
    for node in list(graph.nodes):
        source = _pooled_source(node)
        pair = None if source is not None else _quantized_nhwc(node)
        if pair is not None:
            source = _pair_on(graph, node, pair, names, done)
        if source is not None:
            _rewrite(graph, node, source, done, names)
    return len(done.rewritten) > before


def _quantized_nhwc(node: gs.Node) -> Optional[Tuple[gs.Node, gs.Node, gs.Tensor]]:
    """An int8 model's keras pool, ``ReduceMax(DQ(Q(Transpose(x, NHWC))), [1, 2])`` of one
    scale and zero point each: (the Q, the DQ, the NCHW ``x``), or None."""
    if node.op != "ReduceMax" or len(node.outputs) != 1 or reduce_axes(node) != [1, 2] \
            or int(attr(node, "keepdims", 1)):
        return None
    chain, tensor = [], node.inputs[0]
    for op in ("DequantizeLinear", "QuantizeLinear", "Transpose"):
        producer = tensor.inputs[0] if len(tensor.inputs) == 1 else None
        if producer is None or producer.op != op:
            return None
        chain.append(producer)
        tensor = producer.inputs[0]
    dq, q, transpose = chain
    scalar = all(is_const(t) and const_value(t).size == 1
                 for n in (q, dq) for t in n.inputs[1:] if t.name)
    x = transpose.inputs[0]
    if not scalar or list(attr(transpose, "perm", [])) != _NHWC or len(static_shape(x) or []) != 4:
        return None
    return q, dq, x


def _pair_on(graph: gs.Graph, node: gs.Node, pair: Tuple[gs.Node, gs.Node, gs.Tensor],
             names: Names, done: Rewrites) -> gs.Tensor:
    """The pair's copy on the NCHW ``x``: the dequantized tensor the pool reads. Exact: a
    QuantizeLinear and a DequantizeLinear of one scale and zero point are elementwise, so they
    commute with the Transpose, and the pool reads the same values."""
    q, dq, x = pair
    quantized = gs.Variable(names.fresh(f"{node.name}_nchw_q"), dtype=q.outputs[0].dtype,
                            shape=static_shape(x))
    out = gs.Variable(names.fresh(f"{node.name}_nchw_dq"), dtype=dq.outputs[0].dtype,
                      shape=static_shape(x))
    for op, source, inputs, written in (("QuantizeLinear", q, [x], quantized),
                                        ("DequantizeLinear", dq, [quantized], out)):
        name = names.fresh(f"{source.name}_nchw")
        graph.nodes.append(gs.Node(op, name, attrs=dict(source.attrs),
                                   inputs=inputs + list(source.inputs[1:]), outputs=[written]))
        done.derived[name] = source.name
    return out


def _pooled_source(node: gs.Node) -> Optional[gs.Tensor]:
    """The NCHW tensor whose H and W the ReduceMax ``node`` reduces, or None."""
    if node.op != "ReduceMax" or len(node.outputs) != 1 or not node.inputs:
        return None
    x, axes = node.inputs[0], reduce_axes(node)
    shape = static_shape(x)
    if shape is None or len(shape) != 4 or x.dtype is None \
            or not np.issubdtype(np.dtype(x.dtype), np.floating):
        return None
    if axes == [2, 3]:
        return x
    producer = x.inputs[0] if x.inputs else None
    # keeping the axes, the NHWC form is [N, 1, 1, C]: not the pool's [N, C, 1, 1]
    if axes == [1, 2] and producer is not None and producer.op == "Transpose" \
            and list(attr(producer, "perm", [])) == _NHWC and not int(attr(node, "keepdims", 1)):
        return producer.inputs[0]
    return None


def _rewrite(graph: gs.Graph, node: gs.Node, x: gs.Tensor, done: Rewrites,
             names: Names) -> None:
    keeps = int(attr(node, "keepdims", 1))
    transposed = node.inputs[0] is not x
    node.op = "GlobalMaxPool"
    node.attrs.clear()
    node.inputs.clear()
    node.inputs.append(x)
    if not keeps:
        flatten_after(graph, node, done, names)
    done.rewritten[node.name] = ("ReduceMax over H and W became GlobalMaxPool"
                                 + (" of the Transpose's input" if transposed else "")
                                 + ("" if keeps else " and a Flatten"))

