"""What the picture shows: the original model's data-flow graph, each node with its placement.

Nodes that only compute constants (folded away before partitioning) are left out of the picture
and counted; nodes on the data path that canonicalization removed (Identity, Dropout) are kept
and drawn as removed, so no edge of the data path disappears.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Set

import onnx

MRVL_KIND, CPU_KIND = "mrvl", "cpu"


def _shapes(proto: onnx.ModelProto) -> Dict[str, List[Any]]:
    shapes: Dict[str, List[Any]] = {}
    graph = proto.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                              for d in dims]
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def _data_path(proto: onnx.ModelProto) -> Set[int]:
    """Indices of the nodes that a model input reaches (the rest only compute constants)."""
    inits = {t.name for t in proto.graph.initializer}
    live = {i.name for i in proto.graph.input if i.name not in inits}
    reached: Set[int] = set()
    for index, node in enumerate(proto.graph.node):   # the checker keeps nodes topological
        if any(name in live for name in node.input if name):
            reached.add(index)
            live.update(o for o in node.output if o)
    return reached


def describe(proto: onnx.ModelProto, report: Mapping[str, Any],
             estimate: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The JSON the HTML page draws: nodes, edges, stages (the report's placements on the graph)."""
    entries = {e["index"]: e for e in report["nodes"]}
    shapes = _shapes(proto)
    keep = _data_path(proto)
    nodes, producer = [], {}
    inits = {t.name for t in proto.graph.initializer}
    for i in proto.graph.input:
        if i.name not in inits:
            producer[i.name] = len(nodes)
            nodes.append({"id": len(nodes), "name": i.name, "op": "input", "stage": None,
                          "placement": "io", "outputs": [[i.name, shapes.get(i.name)]]})
    for index in sorted(keep):
        node = proto.graph.node[index]
        entry = entries.get(index, {})
        item = {"id": len(nodes), "name": entry.get("name_in_model", node.name), "op": node.op_type,
                "stage": entry.get("stage"), "placement": entry.get("placement", "removed"),
                "inputs": [[t, shapes.get(t)] for t in node.input if t],
                "outputs": [[t, shapes.get(t)] for t in node.output if t]}
        for key in ("rule", "reason", "layer"):
            if key in entry:
                item[key] = entry[key]
        for t in node.output:
            producer[t] = len(nodes)
        nodes.append(item)
    for o in proto.graph.output:
        nodes.append({"id": len(nodes), "name": o.name, "op": "output", "stage": None,
                      "placement": "io", "inputs": [[o.name, shapes.get(o.name)]]})
    edges = []
    for item in nodes:
        for tensor, _ in item.get("inputs", []):
            if tensor in producer:
                edges.append([producer[tensor], item["id"], tensor])
    return {"model": report["model"], "nodes": nodes, "edges": edges,
            "stages": _stages(nodes, estimate),
            "hidden_constant_nodes": len(proto.graph.node) - len(keep),
            "summary": dict(report["summary"])}


def _stages(nodes: List[Dict[str, Any]], estimate: Optional[Mapping[str, Any]]
            ) -> List[Dict[str, Any]]:
    order: List[str] = []
    for item in nodes:
        if item["stage"] and item["stage"] not in order:
            order.append(item["stage"])
    us = {s["name"]: s.get("microseconds") for s in (estimate or {}).get("stages", [])}
    kinds = {item["stage"]: item["placement"] for item in nodes
             if item["stage"] and item["placement"] in (MRVL_KIND, CPU_KIND)}
    return [{"name": name, "kind": kinds.get(name, CPU_KIND),
             "nodes": sum(1 for n in nodes if n["stage"] == name),
             "estimated_us": us.get(name)} for name in order]
