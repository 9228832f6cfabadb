"""What a node's subgraphs (If branches, Loop and Scan bodies) read from the graph around them.

A branch may read any tensor of an enclosing graph by name without it being an input of its
node (PyTorch's Silero VAD exports: the second If of the decoder reads the first If's output
inside its branches). A pass that finds a node's producers or its readers from ``node.input``
alone misses those reads: it may order the reader first or drop the producer as unread.

Contract. Requires: onnx graphs. Ensures: nothing is changed; ``outer_reads`` is the set of
names a graph's nodes (and, recursively, their subgraphs) read that the graph does not make or
take itself.
"""
from __future__ import annotations

from typing import Iterator, List, Set

import onnx


def subgraphs(node: onnx.NodeProto) -> List[onnx.GraphProto]:
    """The graphs held by ``node``'s attributes (an If's two branches, a Loop's body)."""
    found = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            found.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            found.extend(attr.graphs)
    return found


def outer_reads(graph: onnx.GraphProto) -> Set[str]:
    """The tensor names ``graph`` (a branch, a loop body) reads but does not make itself."""
    made = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    read: Set[str] = set()
    for node in graph.node:
        read.update(node_reads(node))
        made.update(node.output)
    return read - made


def node_reads(node: onnx.NodeProto) -> Iterator[str]:
    """Every name ``node`` reads: its inputs, and what its subgraphs read from outside them."""
    yield from (i for i in node.input if i)
    for sub in subgraphs(node):
        yield from outer_reads(sub)
