"""A ReduceMean over H and W of a 4-D tensor that drops them (``keepdims=0``: a GeM or
average-pooled embedding, timm's ``x.mean((2, 3))``) made one that keeps them, followed by a
Flatten: the keeping form is a global average pool (``mrvl.reduce_mean_global``), the Flatten a
reshape the accelerator takes.

Requires: a graph whose activations' shapes are static.
Ensures: every ``ReduceMean(x, axes=[2, 3], keepdims=0)`` of a 4-D ``x`` keeps its name and
computes ``[N, C, 1, 1]`` (listed in ``rewritten``); a new ``Flatten(axis=1)`` (in ``derived``)
writes its former output ``[N, C]``. Exact: the same mean, then a copy of its values.
"""
from __future__ import annotations

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, reduce_axes, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


def keep_global_mean_dims(graph: gs.Graph, done: Rewrites) -> bool:
    """Rewrite every dropping global ReduceMean in place; True when one was (the caller then
    cleans up and sorts the graph)."""
    names = Names(graph)
    found = [n for n in graph.nodes if _dropping_global_mean(n)]
    for node in found:
        _keep_dims(graph, node, done, names)
    return bool(found)


def _dropping_global_mean(node: gs.Node) -> bool:
    if node.op != "ReduceMean" or len(node.outputs) != 1 or int(attr(node, "keepdims", 1)):
        return False
    shape = static_shape(node.inputs[0]) if node.inputs else None
    return shape is not None and len(shape) == 4 and reduce_axes(node) == [2, 3]


def flatten_after(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names) -> None:
    """``node`` writes ``[N, C, 1, 1]`` (N, C its input's) and a new Flatten its former
    ``[N, C]`` output."""
    n, c = static_shape(node.inputs[0])[:2]
    out = node.outputs[0]
    pooled = gs.Variable(names.fresh(f"{out.name}_pooled"), dtype=out.dtype, shape=[n, c, 1, 1])
    node.outputs[0] = pooled
    flatten = gs.Node("Flatten", names.fresh(f"{node.name}_flatten"), attrs={"axis": 1},
                      inputs=[pooled], outputs=[out])
    graph.nodes.append(flatten)
    done.derived[flatten.name] = node.name


def _keep_dims(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names) -> None:
    node.attrs["keepdims"] = 1
    flatten_after(graph, node, done, names)
    done.rewritten[node.name] = ("keeps H and W (a global average pool); a Flatten after it "
                                 "drops them")
