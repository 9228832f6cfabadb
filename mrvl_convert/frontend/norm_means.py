"""A norm's statistics over several axes as one-axis means in turn: the Reduce layer takes one
axis (or H and W together, a global pool), Keras' LayerNormalization(axis=[1, 2, 3]) or a
one-group GroupNorm reduces three.

Requires: a canonical graph with static activation shapes; the norms in the decomposed form
(``norm_forms.py`` runs first).
Ensures: every ``ReduceMean(x, A, keepdims=1)`` read as a norm's mean (a ``Sub(x, m)`` reads
it) or variance (its input is ``Mul(d, d)``, d such a Sub), A with more than one axis longer
than 1, is a chain of ReduceMeans keeping dims: H and W together first where A holds both of
a 4-D tensor's (the global pool), then each other axis, last first. The unit axes of A are
dropped (a mean over one value is that value). The last ReduceMean keeps the node's name and
output (``rewritten``), the others are ``derived`` from it.

Bound. The mean of equal-sized groups' means is the mean: exact in real arithmetic. In float32
(u = 2**-24) onnxruntime's one sum of the C = prod(n_i) values is within ``(C - 1) u
sum|x| / C`` of the exact mean, the chain within ``(sum(n_i - 1) + k) u sum|x| / C`` (k the
chain's length, one division each); they differ by at most ``(C + sum n_i) u mean|x|`` (for the
variance x is ``d * d``, mean|x| the variance itself).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, reduce_axes, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


def split_norm_means(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Split every multi-axis norm mean in place; True when one was."""
    names, before = Names(graph), len(done.rewritten)
    for node in list(graph.nodes):
        groups = _groups(node) if node.op == "ReduceMean" and _is_norm_mean(node) else None
        if groups is not None:
            _split(graph, node, groups, opset, names, done)
    return len(done.rewritten) > before


def _groups(node: gs.Node) -> Optional[List[List[int]]]:
    """The chain's axis groups, first applied first; None when one group does it already."""
    shape = static_shape(node.inputs[0])
    axes = reduce_axes(node)
    if shape is None or axes is None or not int(attr(node, "keepdims", 1)):
        return None
    long = [a for a in axes if shape[a] != 1]
    spatial = [2, 3] if len(shape) == 4 and {2, 3} <= set(long) else []
    rest = sorted(set(long) - set(spatial), reverse=True)
    groups = ([spatial] if spatial else []) + [[a] for a in rest]
    return groups if len(groups) > 1 else None


def _is_norm_mean(node: gs.Node) -> bool:
    x, m = node.inputs[0], node.outputs[0]
    if any(r.op == "Sub" and r.inputs[0] is x and r.inputs[1] is m for r in m.outputs):
        return True
    square = x.inputs[0] if x.inputs else None
    if square is None or square.op != "Mul" or square.inputs[0] is not square.inputs[1]:
        return False
    d = square.inputs[0]
    sub = d.inputs[0] if d.inputs else None
    if sub is None or sub.op != "Sub" or not sub.inputs[1].inputs:
        return False
    return sub.inputs[1].inputs[0].op == "ReduceMean"


def _split(graph: gs.Graph, node: gs.Node, groups: List[List[int]], opset: int, names: Names,
           done: Rewrites) -> None:
    x = node.inputs[0]
    shape = list(static_shape(x))
    for axes in groups[:-1]:
        shape = [1 if i in axes else n for i, n in enumerate(shape)]
        out = gs.Variable(names.fresh(f"{node.name}_partial"), dtype=x.dtype, shape=list(shape))
        part = gs.Node("ReduceMean", names.fresh(f"{node.name}_partial"), inputs=[x],
                       outputs=[out])
        _set_axes(part, axes, opset, names)
        graph.nodes.append(part)
        done.derived[part.name] = node.name
        x = out
    node.inputs.clear()
    node.inputs.append(x)
    _set_axes(node, groups[-1], opset, names)
    done.rewritten[node.name] = (
        f"a norm's mean over axes {[a for g in groups for a in g]} became one-axis means in "
        f"turn {groups}: exact in real arithmetic, in float32 within (C + sum n_i) 2**-24 "
        "mean|x| (frontend/norm_means.py)")


def _set_axes(node: gs.Node, axes: List[int], opset: int, names: Names) -> None:
    """The axes as the opset spells them (an attribute before 18, an input from 18)."""
    node.attrs["keepdims"] = 1
    if opset >= 18:
        node.attrs.pop("axes", None)
        while len(node.inputs) > 1:
            del node.inputs[len(node.inputs) - 1]
        node.inputs.append(gs.Constant(names.fresh(f"{node.name}_axes"),
                                       np.asarray(axes, np.int64)))
    else:
        node.attrs["axes"] = list(axes)
