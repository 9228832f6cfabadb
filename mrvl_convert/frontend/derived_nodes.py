"""The nodes a rewrite adds in place of one node it serves: each named after that node and its
op, its output after the node's name, appended to the graph and recorded as ``derived`` from the
served node (report.json names the ONNX node a layer comes from).

graphsurgeon's ``Graph.layer`` would also append a node, but it lists every tensor of the graph
on each call (to name what it creates), so a rewrite adding k nodes would cost k walks of the
graph; a rewrite's names come from its ``Names`` instead.

Requires: ``names`` made for ``graph`` (``canonical_forms.Names``).
Ensures: ``DerivedNodes.node`` appends one node with fresh names (``{served}_{op}{suffix}``, its
output ``{name}_out`` unless given) and records it in ``done.derived``; nothing else changes.
The caller keeps the graph's order (canonicalize sorts it after the passes).
"""
from __future__ import annotations

from typing import Any, List, Optional

import onnx_graphsurgeon as gs

from mrvl_convert.frontend.canonical_forms import Names, Rewrites


class DerivedNodes:
    """Adds nodes derived from the node named ``served``; ``last`` is the last one added."""

    def __init__(self, graph: gs.Graph, names: Names, done: Rewrites, served: str,
                 suffix: str = "") -> None:
        self.graph, self.names, self.done, self.served = graph, names, done, served
        self.suffix = suffix
        self.last: Optional[gs.Node] = None

    def node(self, op: str, inputs: List[gs.Tensor], shape: Optional[List[int]] = None,
             dtype: Any = None, out: Optional[gs.Tensor] = None, **attrs: Any) -> gs.Tensor:
        """A new ``op`` node of ``inputs`` and ``attrs`` writing ``out`` (default: a new tensor
        of ``shape`` and ``dtype``); its output."""
        name = self.names.fresh(f"{self.served}_{op.lower()}{self.suffix}")
        out = out or gs.Variable(self.names.fresh(f"{name}_out"), dtype=dtype, shape=shape)
        self.last = gs.Node(op, name, attrs=dict(attrs), inputs=inputs, outputs=[out])
        self.graph.nodes.append(self.last)
        self.done.derived[name] = self.served
        return out
