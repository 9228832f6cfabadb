"""graphsurgeon's topological sort without its recursion.

``gs.Graph.toposort`` computes each node's level (1 + the highest level of the nodes producing
its inputs) by recursing along the longest path, two Python frames a node: an unrolled recurrent
cell (``frontend/recurrent_unroll.py``) makes paths of thousands of nodes, past Python's
recursion limit. ``toposort`` here walks the same producers in the same order with its own
stack, so it gives the same node order as graphsurgeon (levels ascending, ties in the order
graphsurgeon's recursion first finishes them).

Requires: a graphsurgeon graph. Ensures: its nodes reordered in place exactly as
``graph.toposort()`` orders an acyclic graph (its subgraphs' and functions' nodes sorted by
graphsurgeon itself, as that call does); a graph with a cycle, or whose node reads a tensor
made by a node outside it, goes to graphsurgeon's own sort, which raises its error.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set, Tuple

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import local_names


def toposort(graph: gs.Graph) -> gs.Graph:
    """``graph`` sorted in place (returned, as ``gs.Graph.toposort`` returns it)."""
    functions = getattr(graph, "functions", ())
    for function in functions:
        function.toposort(mode="nodes")
    # graph.subgraphs()'s order: each holder's subgraphs in turn
    holders = [node for node in graph.nodes if node.attrs and any(node.subgraphs())]
    subgraphs = [subgraph for node in holders for subgraph in node.subgraphs()]
    for subgraph in subgraphs:
        subgraph.toposort(recurse_subgraphs=True, recurse_functions=False, mode="nodes")
    order = _level_order(graph, {id(node) for node in holders})
    if order is None:  # graphsurgeon names the cycle or the stray node
        return graph.toposort()
    graph.nodes = order
    if not functions and not subgraphs:
        # graphsurgeon's function sort would find no function to merge or order (and map
        # every tensor of the graph first: a third of the sort of an unrolled model)
        return graph
    return graph.toposort(mode="functions")  # graphsurgeon's: merges the subgraphs' too


def _producers(node: gs.Node, local: Set[str], holders: Set[int]) -> Iterator[gs.Node]:
    """The nodes making the node's local inputs, and what its subgraphs read from outside
    them, in graphsurgeon's order (each once, where it first appears). ``holders``: the ids
    of the nodes holding a subgraph (asking every node for its subgraphs walks its attributes:
    a third of the sort of a graph without any)."""
    tensors = list(node.inputs)
    for subgraph in node.subgraphs() if id(node) in holders else ():
        tensors += list(subgraph._foreign_tensors().values())
    seen: Set[int] = set()
    for tensor in tensors:
        if tensor.name not in local:
            continue
        for producer in tensor.inputs:
            if id(producer) not in seen:
                seen.add(id(producer))
                yield producer


def _level_order(graph: gs.Graph, holders: Set[int]) -> Optional[List[gs.Node]]:
    """The nodes by level, ties in the order their levels were settled; None on a cycle or a
    producer outside the graph."""
    members = {id(node) for node in graph.nodes}
    local = local_names(graph)
    # id -> (node, level), in the order the depth-first walk settles them
    settled: Dict[int, Tuple[gs.Node, int]] = {}
    for root in graph.nodes:
        if id(root) in settled:
            continue
        # frames of the walk: [node, its producers still to visit, highest level seen]
        stack: List[list] = [[root, _producers(root, local, holders), -1]]
        path = {id(root)}
        while stack:
            frame = stack[-1]
            producer = next(frame[1], None)
            if producer is None:
                stack.pop()
                path.discard(id(frame[0]))
                settled[id(frame[0])] = (frame[0], frame[2] + 1)
                if stack:
                    stack[-1][2] = max(stack[-1][2], frame[2] + 1)
            elif id(producer) in settled:
                frame[2] = max(frame[2], settled[id(producer)][1])
            elif id(producer) in path or id(producer) not in members:
                return None
            else:
                path.add(id(producer))
                stack.append([producer, _producers(producer, local, holders), -1])
    ranked = list(settled.values())
    ranked.sort(key=lambda entry: entry[1])  # stable: ties keep the settling order
    return [node for node, _ in ranked]
