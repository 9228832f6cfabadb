"""manifest.json and report.json: how the stages are wired, and where every original node went."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..canonicalize import CanonicalGraph
from ..layout import DEFAULT_LABELS, MrvlSubgraph
from ..load import LoadedModel
from ..partition import Plan
from ..rules.matcher import MatchPlan

FORMAT_VERSION = "1"


def _dtype(tensor: gs.Tensor) -> str:
    return np.dtype(tensor.dtype).name if tensor.dtype is not None else "unknown"


def _io(value: onnx.ValueInfoProto) -> Dict[str, Any]:
    tensor_type = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
             for d in tensor_type.shape.dim]
    return {"name": value.name, "shape": shape, "dtype": dtype}


def _boundary(tensor: gs.Tensor, layout: Optional[str] = None) -> Dict[str, Any]:
    shape = [int(d) for d in tensor.shape]
    return {"tensor": tensor.name, "shape": shape, "dtype": _dtype(tensor),
            "layout": layout or DEFAULT_LABELS.get(len(shape), "")}


def manifest(loaded: LoadedModel, plan: Plan, subgraphs: Mapping[str, MrvlSubgraph],
             files: Mapping[str, Mapping[str, str]], options: Dict[str, Any],
             tool_version: str) -> Dict[str, Any]:
    stages = []
    for stage in plan.stages:
        entry: Dict[str, Any] = {"kind": stage.kind, "name": stage.name}
        entry.update(files[stage.name])
        if stage.kind == "mrvl":
            sub = subgraphs[stage.name]
            entry["inputs"] = [_boundary(t, lay.name)
                               for t, lay in zip(sub.input_tensors, sub.input_layouts)]
            entry["layers"] = len(sub.layers)
        else:
            entry["inputs"] = [_boundary(t) for t in stage.inputs]
            entry["nodes"] = len(stage.nodes)
        entry["outputs"] = [_boundary(t) for t in stage.outputs]
        stages.append(entry)
    graph = loaded.proto.graph
    init_names = {t.name for t in graph.initializer}
    return {
        "format_version": FORMAT_VERSION,
        "tool_version": tool_version,
        "model": {"name": loaded.name, "sha256": loaded.sha256,
                  "inputs": [_io(v) for v in graph.input if v.name not in init_names],
                  "outputs": [_io(v) for v in graph.output]},
        "options": options,
        "stages": stages,
    }


def report(loaded: LoadedModel, canonical: CanonicalGraph, matches: MatchPlan, plan: Plan,
           subgraphs: Mapping[str, MrvlSubgraph]) -> Dict[str, Any]:
    stage_of = plan.stage_of()
    layer_of: Dict[str, str] = {}
    for sub in subgraphs.values():
        for k, layer in enumerate(sub.layers):
            for name in layer.source_nodes:
                layer_of[name] = f"{sub.name}_{k}"
    rule_of = {n.name: c.rule.name for c in matches.composites for n in c.nodes}
    entries: List[Dict[str, Any]] = []
    counts = {"mrvl": 0, "cpu": 0, "removed": 0}
    for index, node in enumerate(loaded.proto.graph.node):
        entry = _entry(node, index, loaded, canonical, matches, plan, stage_of, layer_of, rule_of)
        counts[entry["placement"]] += 1
        entries.append(entry)
    return {
        "format_version": FORMAT_VERSION,
        "model": loaded.name,
        "policy": plan.policy,
        "summary": {"nodes": len(entries), "mrvl_nodes": counts["mrvl"],
                    "cpu_nodes": counts["cpu"], "removed_nodes": counts["removed"],
                    "mrvl_subgraphs": sum(s.kind == "mrvl" for s in plan.stages),
                    "cpu_subgraphs": sum(s.kind == "cpu" for s in plan.stages)},
        "nodes": entries,
    }


def _entry(node, index, loaded, canonical, matches, plan, stage_of, layer_of, rule_of):
    name = node.name
    entry: Dict[str, Any] = {"index": index, "name": name, "op_type": node.op_type}
    in_model = loaded.original_names.get(name, name)
    if in_model and in_model != name:
        entry["name_in_model"] = in_model
    if name in canonical.removed:
        entry.update(placement="removed", reason=canonical.removed[name])
        return entry
    stage = stage_of[name]
    entry["stage"] = stage.name
    if stage.kind == "mrvl":
        entry.update(placement="mrvl", rule=rule_of[name])
        if name in layer_of:
            entry["layer"] = layer_of[name]
        else:
            entry["reason"] = "absorbed into the NHWC layout: no layer needed"
        return entry
    entry["placement"] = "cpu"
    if name in plan.demoted:
        entry["reason"] = plan.demoted[name]
    elif name in matches.near_miss:
        miss = matches.near_miss[name]
        entry["reason"] = f"{miss.binding.rule.name}: {miss.reason}"
        entry["near_miss"] = {"rule": miss.binding.rule.name, "reason": miss.reason,
                              "nodes": [n.name for n in miss.binding.nodes],
                              "failed_on": list(miss.failed_nodes)}
    else:
        entry["reason"] = matches.unmatched_reason.get(name, "no rule matched")
    return entry
