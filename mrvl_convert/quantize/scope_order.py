"""A QDQ model's nodes put back in an order where an If's or Loop's branch reads outer tensors
only after they are made.

Why: onnxruntime's quantizer sorts the graph it writes by the nodes' own inputs; a branch that
reads a tensor of the enclosing graph (PyTorch's exports of Silero VAD: the second ``If`` of its
decoder reads ``/decoder/If_output_0``, the first If's output, inside its branches) is not an
input of its If, so that If can land before the node making the tensor, and onnx's checker then
refuses the model ("Nodes in a graph must be topologically sorted"): silero_vad_half with
``--quantize int8`` did not convert.

Contract. Requires: an acyclic model. Ensures: the main graph's nodes reordered, in place, so
that every node comes after the makers of its inputs and of every tensor its subgraphs read from
the outer scope; nodes already in such an order keep it (a stable sort: among the nodes ready,
the earliest first); nothing else changes, so the model computes what it did (exact). A graph
whose reads cannot be ordered (a cycle, a tensor nobody makes) is left as it is, for the
checker to name.
"""
from __future__ import annotations

import heapq
from typing import Dict, List, Set

import onnx

from mrvl_convert.core.scopes import node_reads, subgraphs


def ordered_for_branches(model: onnx.ModelProto) -> bool:
    """Reorder ``model``'s main graph as the module docstring says; whether the order changed."""
    nodes = list(model.graph.node)
    if not any(subgraphs(n) for n in nodes):
        return False
    maker = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    needs = [{maker[name] for name in node_reads(node) if name in maker} for node in nodes]
    order = _stable_order(needs)
    if order is None or order == list(range(len(nodes))):
        return False
    del model.graph.node[:]
    model.graph.node.extend(nodes[k] for k in order)
    return True


def _stable_order(needs: List[Set[int]]) -> "List[int] | None":
    readers: Dict[int, List[int]] = {}
    waiting = [len(n - {k}) for k, n in enumerate(needs)]
    for k, made_by in enumerate(needs):
        for m in made_by - {k}:
            readers.setdefault(m, []).append(k)
    ready = [k for k, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: List[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for r in readers.get(k, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    return order if len(order) == len(needs) else None
