"""The part of a graph graphsurgeon's constant folding can change, as a graph of its own.

graphsurgeon's ``Graph.fold_constants`` copies the whole graph, cleans the copy up and walks it
several times, whatever it folds: on a 1000-node model that is ~0.1 s of CPU for a handful of
shape nodes, or for none (issue 45: the conversion's cost was per node). ``fold_view`` gives it a
graph of only the nodes it may fold and the nodes that read what they write. The view shares
the model graph's Node and Tensor objects, so what graphsurgeon folds in it is folded in the
model's graph.

Exact (the same tensors become the same constants): graphsurgeon folds a node only when every
input is a constant or a folded output, or it is a Shape (or a Gather or Slice of one) whose
input shape is static. Every such node is a *candidate* here (a candidate: a Shape, or a node
whose inputs are all constants or candidates' outputs), so each fold decision reads the same
inputs in the view as in the whole graph, in the same order (the view keeps the graph's node
order, so the fold bounds' budget is asked about the same nodes in turn). A folded tensor is
evaluated when no node reads it, or when a reader is not folded (graphsurgeon compares the
readers' names with the folded tensors' names); every reader of a candidate's output is in the
view, so these readers are the same too, and a reader whose name is a constant's outside the
view makes the view refused. The subgraph onnxruntime evaluates is the same nodes either way.

What the view cannot reproduce is refused (``None``: fold the whole graph): local functions,
a node holding a subgraph (If, Loop, Scan: folded recursively, their outer tensors copied), and
graphsurgeon's cast elision (an Add/Mul/... reading a Cast to float, which it may rewire anywhere
in the graph).

Requires: a graphsurgeon graph (topologically sorted or not).
Ensures: ``None``, or a ``gs.Graph`` of the candidates and their readers in the graph's node
order, no inputs and outputs, the graph's opset, domains and name; the graph is unchanged.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import numpy as np
import onnx
import onnx_graphsurgeon as gs

# graphsurgeon's cast elision: these ops reading a Cast to float may be rewired to its input
_CAST_ELISION_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Greater",
                               "Less", "Concat"})
_VALUE_ATTRS = frozenset({"value", "value_float", "value_floats", "value_int", "value_ints"})
_INTS = (onnx.TensorProto.INT32, onnx.TensorProto.INT64)


def fold_view(graph: gs.Graph) -> Optional[gs.Graph]:
    """The nodes ``graph.fold_constants`` may fold and their readers, or None where only the
    whole graph folds the same (see the module docstring)."""
    if graph.functions or any(_holds_subgraph(n) or _cast_elision(n) for n in graph.nodes):
        return None
    candidates = _candidates(graph)
    readers = {id(c) for node in candidates.values() for t in node.outputs for c in t.outputs}
    chosen = set(candidates) | readers
    nodes = [n for n in graph.nodes if id(n) in chosen]
    view = gs.Graph(nodes=nodes, name=graph.name, doc_string=graph.doc_string,
                    opset=graph.opset, import_domains=graph.import_domains,
                    producer_name=graph.producer_name, producer_version=graph.producer_version)
    if hasattr(graph, "ir_version"):  # graphsurgeon >= 0.5.3 exports it
        view.ir_version = graph.ir_version
    return None if _name_clash(graph, view) else view


def lower_constant_nodes(graph: gs.Graph) -> None:
    """graphsurgeon's first folding pass, before it: the output of each Constant node with one
    value attribute is a constant tensor, the node left without outputs (cleanup drops it).
    So a Constant node's readers are not in the view unless they fold themselves."""
    for node in graph.nodes:
        if node.op != "Constant" or len(node.attrs) != 1 or len(node.outputs) != 1:
            continue
        (name, value), = node.attrs.items()
        tensor = node.outputs[0]
        if name not in _VALUE_ATTRS or isinstance(value, gs.Node.AttributeRef) or (
                len(tensor.inputs) != 1):
            continue  # graphsurgeon leaves these too
        tensor.to_constant(value._values if isinstance(value, gs.Constant) else np.array(value))
        tensor.inputs.clear()


def _candidates(graph: gs.Graph) -> Dict[int, gs.Node]:
    """Shapes, and the nodes whose inputs are all constants or candidates' outputs."""
    known: Set[str] = set()
    found: Dict[int, gs.Node] = {}
    # a node without outputs (a Constant node lowered) folds to nothing
    queue: List[gs.Node] = [n for n in graph.nodes
                            if n.outputs and (n.op == "Shape" or _ready(n, known))]
    while queue:
        node = queue.pop()
        if id(node) in found:
            continue
        found[id(node)] = node
        known.update(t.name for t in node.outputs)
        queue.extend(reader for t in node.outputs for reader in t.outputs
                     if id(reader) not in found and _ready(reader, known))
    return found


def _ready(node: gs.Node, known: Set[str]) -> bool:
    return all(isinstance(t, gs.Constant) or t.name in known
               for t in node.inputs if not t.is_empty())


def _holds_subgraph(node: gs.Node) -> bool:
    return any(isinstance(value, gs.Graph) or (isinstance(value, (list, tuple)) and any(
        isinstance(v, gs.Graph) for v in value)) for value in node.attrs.values())


def _cast_elision(node: gs.Node) -> bool:
    """graphsurgeon might rewire this node: its cast elision's tests but the ones on types
    (an op of its list whose outputs only Casts read, one to int32/int64, reading a Cast to
    float)."""
    if node.op not in _CAST_ELISION_OPS:
        return False
    readers = [r for t in node.outputs for r in t.outputs]
    return (all(r.op == "Cast" for r in readers)
            and any(r.attrs.get("to") in _INTS for r in readers)
            and any(p.op == "Cast" and p.attrs.get("to") == onnx.TensorProto.FLOAT
                    for t in node.inputs for p in t.inputs))


def _name_clash(graph: gs.Graph, view: gs.Graph) -> bool:
    """A view node named as a constant the view lacks: graphsurgeon would read it as folded in
    the whole graph only (it compares readers' names with folded tensors' names)."""
    inside = view.tensors()
    outside = {name for name, t in graph.tensors().items()
               if isinstance(t, gs.Constant) and name not in inside}
    return any(node.name in outside for node in view.nodes)
