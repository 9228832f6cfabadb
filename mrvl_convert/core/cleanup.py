"""graphsurgeon's ``cleanup(remove_unused_graph_inputs=False)`` in fewer Python steps.

``gs.Graph.cleanup`` maps every tensor of the graph (``Graph.tensors``, a new list per node),
numbers the nodes through a ``setattr`` each, filters tensors through a Python object's
``__call__`` and asks every node reached for its subgraphs: about 14% of an unrolled model's
conversion (plcmos_v2), which cleans up after each of canonicalize's rewrites. ``cleanup`` here
walks the same tensors in the same order with plain sets, for a graph with no subgraph and no
local function (the one case it handles; any other goes to graphsurgeon).

Requires: a graphsurgeon graph. Ensures: the graph changed in place exactly as
``graph.cleanup(remove_unused_graph_inputs=False)`` changes it (the producers of its inputs
disconnected, the nodes no output depends on removed with their inputs and outputs cleared,
the order of the rest kept, ``graph.inputs`` a new list of the same tensors), and returned. A
graph holding a subgraph or a function, or whose outputs depend on a node not in its node list,
goes to graphsurgeon's own cleanup (which raises its error for the latter).
"""
from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional, Sequence, Set

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import local_names, subgraphs


def cleanup(graph: gs.Graph) -> gs.Graph:
    """``graph`` cleaned up in place (returned, as ``gs.Graph.cleanup`` returns it)."""
    if getattr(graph, "functions", None) or any(subgraphs(node) for node in graph.nodes):
        return graph.cleanup(remove_unused_graph_inputs=False)
    for tensor in graph.inputs:  # first, as graphsurgeon: their producers are not used
        tensor.inputs.clear()
    used = _used_nodes(graph)
    if used is None:
        return graph.cleanup(remove_unused_graph_inputs=False)
    graph.inputs = list(graph.inputs)
    nodes = []
    for node in graph.nodes:
        if id(node) in used:
            nodes.append(node)
        else:
            node.inputs.clear()
            node.outputs.clear()
    graph.nodes = nodes
    return graph


def _used_nodes(graph: gs.Graph) -> Optional[Set[int]]:
    """The ids of the nodes some output depends on (``Graph._get_used_node_ids``'s walk: a
    tensor is taken once per name, an omitted one always, one not local never; the outputs
    first, then each taken tensor's producers' inputs in turn), or None when the walk reaches
    a node that is not in ``graph.nodes``."""
    local, seen = local_names(graph), set()
    listed = set(map(id, graph.nodes))
    reads: Deque[Sequence[gs.Tensor]] = deque([graph.outputs])  # what to take, in order
    queue: List[gs.Tensor] = []
    used: Set[int] = set()
    index = 0
    while reads:
        for read in reads.popleft():
            name = read.name
            if name == "":
                queue.append(read)
            elif name in local and name not in seen:
                seen.add(name)
                queue.append(read)
        while not reads and index < len(queue):
            tensor = queue[index]
            index += 1
            for node in tensor.inputs:
                if id(node) not in listed:
                    return None
                used.add(id(node))
                reads.append(node.inputs)
    return used
