"""An ``If`` whose condition is constant becomes the branch it chooses; one left in the graph
(or a ``Loop``) says why it stays on CPU.

A condition is constant when the fixed input shapes decide it (``if x.shape[1] > 1``) or an
input pinned to a value does (``values={"sr": 16000}``, ``input_values.py``). graphsurgeon
flattens such an If itself, but rebinds only the first of its outputs (it walks the If's
outputs while each rebinding removes one from them), so a two-output If (a model's output and
its recurrent state) lost the second; here every output is rebound.

Requires: a graphsurgeon graph, folded (the condition is a ``gs.Constant``; one that is not a
single value is left for onnxruntime to refuse).
Ensures: exact, an If's outputs are computed by the nodes of the branch onnxruntime would run
for that condition (a branch output that branch nodes read too is read as the If's output,
the one tensor it is; one handed out twice is copied by an Identity); the branch's own
tensors are renamed ``<name>_<if node>`` (they may
repeat names of the outer graph, or of the other branch) and so are its nodes where their name
is taken; a branch output that is an outer tensor or a constant is passed through an Identity.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Set

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, subgraphs
from mrvl_convert.frontend.input_values import describe

# Why an op with a subgraph stays on CPU (report.json's ``canonical``).
KEPT: Mapping[str, str] = {
    "If": ("an If runs on CPU: no layer chooses a branch, and its condition {cond} is decided "
           "at run time{by}; pin the input(s) that decide it to convert one branch "
           "(--input-value NAME=V, values={{...}})"),
    "Loop": ("a Loop runs on CPU: no layer runs a loop body, and its trip count and condition "
             "are decided at run time"),
    "Scan": "a Scan runs on CPU: no layer runs a scan body",
}


def flatten_decided_ifs(graph: gs.Graph, origins: Optional[Dict[str, str]] = None
                        ) -> List[str]:
    """Replace every If of ``graph`` whose condition is a constant by the nodes of the branch it
    chooses (nested ones too, as they become top-level); returns the Ifs flattened.
    ``origins`` (filled): each node taken out of a branch -> the top-level If it was in."""
    origins = {} if origins is None else origins
    flattened: List[str] = []
    index = 0
    while index < len(graph.nodes):
        node = graph.nodes[index]
        if node.op == "If" and node.inputs and is_const(node.inputs[0]) \
                and np.asarray(const_value(node.inputs[0])).size == 1:
            nodes = _branch_nodes(graph, node)
            graph.nodes[index:index + 1] = nodes
            origin = origins.pop(node.name, node.name)
            origins.update((n.name, origin) for n in nodes)
            flattened.append(node.name)
            continue  # the branch's first node is at ``index`` now (it may be an If itself)
        index += 1
    return flattened


def decided_if(name: str, values: Mapping[str, np.ndarray]) -> str:
    """Why the If ``name`` is gone (report.json)."""
    given = f" and the given input values ({describe(values)})" if values else ""
    return (f"an If whose condition is constant once the input shapes{given} are fixed: "
            "replaced by the branch it chooses (its nodes are listed as derived from it)")


def kept_reasons(graph: gs.Graph) -> Dict[str, str]:
    """Node name -> why it stays on CPU, for every If, Loop and Scan left in ``graph``."""
    reasons: Dict[str, str] = {}
    for node in graph.nodes:
        if node.op not in KEPT:
            continue
        if node.op == "If":
            cond = node.inputs[0].name if node.inputs else "?"
            inputs = _graph_inputs_behind(graph, node.inputs[0]) if node.inputs else []
            by = f" from input(s) {', '.join(map(repr, inputs))}" if inputs else ""
            reasons[node.name] = KEPT["If"].format(cond=repr(cond), by=by)
        else:
            reasons[node.name] = KEPT[node.op]
    return reasons


def _branch_nodes(graph: gs.Graph, node: gs.Node) -> List[gs.Node]:
    """The nodes of the branch ``node``'s constant condition chooses, bound to its outputs."""
    cond = bool(np.asarray(const_value(node.inputs[0])).reshape(-1)[0])
    branch: gs.Graph = node.attrs["then_branch" if cond else "else_branch"]
    _detach(node.attrs["else_branch" if cond else "then_branch"])
    taken: Set[str] = {n.name for n in graph.nodes}
    for tensor in branch._local_tensors().values():  # graphsurgeon's own notion of "local"
        tensor.name = f"{tensor.name}_{node.name}"
    nodes = list(branch.nodes)
    for inner in nodes:
        if inner.name in taken:
            inner.name = f"{inner.name}_{node.name}"
    outer_outputs, inner_outputs = list(node.outputs), list(branch.outputs)
    node.outputs.clear()
    node.inputs.clear()
    bound: Dict[int, gs.Tensor] = {}  # inner tensor -> the outer output it became
    for outer, inner in zip(outer_outputs, inner_outputs):
        producers = list(inner.inputs)
        if id(inner) in bound:  # the branch hands one tensor out twice: the second a copy
            nodes.append(gs.Node("Identity", f"{node.name}_{outer.name}_pass",
                                 inputs=[bound[id(inner)]], outputs=[outer]))
        elif len(producers) == 1 and any(producers[0] is n for n in branch.nodes):
            _rebind(inner, outer)
            bound[id(inner)] = outer
        else:  # an outer tensor or a constant: the If passes it through
            nodes.append(gs.Node("Identity", f"{node.name}_{outer.name}_pass", inputs=[inner],
                                 outputs=[outer]))
    return nodes


def _rebind(inner: gs.Tensor, outer: gs.Tensor) -> None:
    """The branch node making ``inner`` makes ``outer`` instead, and every branch node reading
    ``inner`` (a branch output read inside the branch too) reads ``outer``: left reading
    ``inner``, it would read a tensor nothing produces."""
    producer = inner.inputs[0]
    for reader in list(inner.outputs):
        for k, tensor in enumerate(reader.inputs):
            if tensor is inner:
                reader.inputs[k] = outer
    producer.outputs[producer.outputs.index(inner)] = outer


def _detach(branch: gs.Graph) -> None:
    """The branch not taken reads outer tensors no more (their readers would list its nodes)."""
    for node in branch.nodes:
        for sub in subgraphs(node):
            _detach(sub)
        node.inputs.clear()
        node.outputs.clear()


def _graph_inputs_behind(graph: gs.Graph, tensor: gs.Tensor) -> List[str]:
    """The graph inputs ``tensor`` is computed from, sorted."""
    inputs = {t.name for t in graph.inputs}
    seen: Set[int] = set()
    found: Set[str] = set()
    stack = [tensor]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.name in inputs:
            found.add(current.name)
        for producer in current.inputs:
            stack.extend(producer.inputs)
    return sorted(found)
