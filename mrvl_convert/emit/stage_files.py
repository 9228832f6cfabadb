"""The stage files of an artifact directory: a Nodes-JSON and a Constants-JSON per Mrvl stage,
an ONNX model per CPU stage, named after the stage."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import onnx

from mrvl_convert.emit import cpu_onnx, mrvl_json
from mrvl_convert.emit.publish import StagingDir
from mrvl_convert.frontend.canonicalize import CanonicalGraph
from mrvl_convert.frontend.load import LoadedModel
from mrvl_convert.ir.layout import MrvlSubgraph
from mrvl_convert.ir.stages import Plan, Stage

# A Mrvl stage's Nodes-JSON, and its constants' shapes (what the cost estimate reads of them).
MrvlDocuments = Tuple[Dict[str, Any], Dict[str, List[int]]]


@dataclass
class StageFiles:
    """What ``write_stages`` wrote: per stage, its files by role (``nodes_json``,
    ``consts_json``; ``onnx``), as the manifest lists them; per Mrvl stage, its documents."""
    files: Dict[str, Dict[str, str]] = field(default_factory=dict)
    mrvl: Dict[str, MrvlDocuments] = field(default_factory=dict)


def mrvl_file_names(stage: Stage) -> Dict[str, str]:
    return {"nodes_json": f"{stage.name}-nodes.json", "consts_json": f"{stage.name}-consts.json"}


def cpu_file_names(stage: Stage) -> Dict[str, str]:
    return {"onnx": f"{stage.name}.onnx"}


def write_stages(staging: StagingDir, plan: Plan, subgraphs: Mapping[str, MrvlSubgraph],
                 canonical: CanonicalGraph, loaded: LoadedModel, layer_set: str) -> StageFiles:
    """Write every stage of ``plan`` into ``staging``, in the plan's order."""
    written = StageFiles()
    source = _cpu_source(plan, canonical, loaded)
    for stage in plan.stages:
        if stage.kind == "mrvl":
            names = mrvl_file_names(stage)
            nodes_doc, consts_doc = mrvl_json.build(subgraphs[stage.name], layer_set)
            written.mrvl[stage.name] = (nodes_doc, {k: c["shape"] for k, c in consts_doc.items()})
            staging.write_json(names["nodes_json"], nodes_doc, "nodes")
            staging.write_consts(names["consts_json"], consts_doc)
        else:
            names = cpu_file_names(stage)
            cpu_model = cpu_onnx.build(stage, source)
            staging.write_onnx(names["onnx"], cpu_model,
                               external=cpu_onnx.needs_external_data(cpu_model))
        written.files[stage.name] = names
    return written


def _cpu_source(plan: Plan, canonical: CanonicalGraph, loaded: LoadedModel
                ) -> Optional[onnx.ModelProto]:
    """The canonical graph as ONNX, which the CPU stages are cut from (of it, only what they
    read: ``cpu_onnx.source``); None without a CPU stage."""
    if not any(s.kind == "cpu" for s in plan.stages):
        return None
    wanted = {n.name for s in plan.stages if s.kind == "cpu" for n in s.nodes}
    proto = cpu_onnx.source(canonical.graph, wanted)
    proto.ir_version = loaded.proto.ir_version
    return proto
