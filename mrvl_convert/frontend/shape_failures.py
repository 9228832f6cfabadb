"""A model whose control flow defeats onnx's strict shape inference, converted around it.

A decoder's ``Loop`` (or an ``If``/``Scan``) may hold a body onnx cannot infer (an exporter's
Cast whose declared rank its inferred one contradicts): strict inference then refuses the whole
model, though onnxruntime runs it. What onnxruntime's own partitioners do instead: the nodes
onnx can infer are inferred, the control-flow node and what depends on shapes only it knows stay
on CPU, where onnxruntime runs them as the model does.

Requires: a model and the exception strict inference raised on it.
Ensures: ``infer_around`` gives the model as onnx's non-strict inference shapes it and the
control-flow nodes whose inference failed, each with onnx's message, when every top-level node
strict inference names is such a node or reads, directly or not, an output of one (a
consequence: strict inference left its inputs untyped); else the first other node that fails
(``PlainFailure``: a plain node's own failure stays load's clear error, naming it).
``opaque_nodes`` names each node of a graph whose shapes stay unknown for that reason, with a
one-line reason naming the failing node and onnx's message. Exact: nothing is rewritten; those
nodes run on onnxruntime as the model does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Set, Tuple, Union

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape

CONTROL_FLOW = ("Loop", "If", "Scan")
# onnx names each failing node as "(op_type:Loop, node name: Loop.0): <its message>"
_FAILURE = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\): (.*)")
_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class Inferred:
    """Non-strict inference's model, and each failing control-flow node with onnx's message."""
    model: onnx.ModelProto
    failures: Dict[str, str]


@dataclass(frozen=True)
class PlainFailure:
    """A node outside control flow whose own inference fails: load's error names it."""
    node: str
    message: str


def infer_around(proto: onnx.ModelProto, error: BaseException,
                 infer: Callable[..., onnx.ModelProto]) -> Union[Inferred, PlainFailure, None]:
    """``infer(proto, **options)``: onnx's inference, called here without strict mode. None:
    no control-flow node fails (load's error as it was)."""
    top = {n.name: n for n in proto.graph.node}
    failing = _failing_nodes(str(error), top)
    roots = {name: text for name, text in failing.items() if top[name].op_type in CONTROL_FLOW}
    if not roots:
        return None
    after = _after(proto.graph, roots)
    for name in [n for n in failing if n not in roots]:
        if not after.intersection(top[name].input):  # not one strict inference left untyped
            return PlainFailure(name, failing[name])
    try:
        inferred = infer(proto, check_type=True, strict_mode=False)
    except Exception:  # non-strict inference raises only on a malformed model: load's error
        return None
    return Inferred(inferred, roots)


def _failing_nodes(text: str, top: Mapping[str, onnx.NodeProto]) -> Dict[str, str]:
    """Top-level node -> onnx's message: the first node named on each line of ``text`` (the
    nodes of a body follow their control-flow node on its line)."""
    failing: Dict[str, str] = {}
    for line in text.splitlines():
        found = _FAILURE.search(line)
        if found and found[2] in top:
            failing.setdefault(found[2], " ".join(found[3].split())[:_MESSAGE_CHARS])
    return failing


def _after(graph: onnx.GraphProto, roots: Mapping[str, str]) -> Set[str]:
    """The tensors computed, directly or not, from an output of a root (nodes in graph order,
    as the checker has them)."""
    after: Set[str] = set()
    for node in graph.node:
        if node.name in roots or after.intersection(node.input):
            after.update(o for o in node.output if o)
    return after


def opaque_nodes(graph: gs.Graph, failures: Mapping[str, str]) -> Dict[str, str]:
    """Node -> why it must run on CPU: each failing node, and each node after one whose outputs
    have no static shape (onnxruntime could not give one that holds for every input)."""
    if not failures:
        return {}
    opaque: Dict[str, str] = {}
    for node in graph.nodes:
        if node.name in failures:
            opaque[node.name] = (f"onnx shape inference fails inside this {node.op} "
                                 f"({failures[node.name]}): its outputs' shapes are unknown, so "
                                 "it runs on onnxruntime")
    for node, root in _downstream(graph, list(opaque)).values():
        if any(static_shape(t) is None for t in node.outputs):
            opaque.setdefault(node.name, f"its shapes depend on {root!r}, whose shapes onnx "
                                         f"cannot infer ({failures[root]})")
    return opaque


def _downstream(graph: gs.Graph, roots: List[str]) -> Dict[str, Tuple[gs.Node, str]]:
    """Each node that reads, directly or not, an output of a root: its name -> (it, that root),
    in graph order."""
    by_name = {n.name: n for n in graph.nodes}
    found: Dict[str, str] = {}
    stack = [(by_name[r], r) for r in roots if r in by_name]
    while stack:
        node, root = stack.pop()
        for tensor in node.outputs:
            for reader in tensor.outputs:
                if reader.name not in found and reader.name not in roots:
                    found[reader.name] = root
                    stack.append((reader, root))
    return {n.name: (n, found[n.name]) for n in graph.nodes if n.name in found}


def after_failures(graph: gs.Graph, failures: Mapping[str, str]) -> Set[str]:
    """The tensors a failing node computes, directly or not: their dims only a run decides."""
    if not failures:
        return set()
    after = {t.name for n, _ in _downstream(graph, list(failures)).values() for t in n.outputs}
    return after | {t.name for n in graph.nodes if n.name in failures for t in n.outputs}


def declared_dims(graph: gs.Graph, loaded: onnx.ModelProto, outputs: Set[str]) -> None:
    """Each model output of ``outputs`` of known rank takes the static dims the model declares
    for it where nothing else told them (a decoder's ``[N, T, 50]``: its 50)."""
    declared = {o.name: o.type.tensor_type.shape.dim for o in loaded.graph.output}
    for tensor in graph.outputs:
        dims = declared.get(tensor.name)
        if tensor.name not in outputs or tensor.shape is None or len(dims or ()) != len(
                tensor.shape):
            continue
        tensor.shape = [d if d is not None else (given.dim_value or None)
                        for d, given in zip(tensor.shape, dims)]
