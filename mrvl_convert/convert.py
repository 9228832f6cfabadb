"""The whole flow for one model: load, canonicalize, match, partition, layout, emit."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import onnx_graphsurgeon as gs

from . import __version__
from .canonicalize import canonicalize
from .emit import cpu_onnx, documents, mrvl_json
from .emit.publish import StagingDir
from .errors import MrvlConvertError, UnsupportedModelError
from .load import ModelLike, load_model
from .lower import lower_stage
from .partition import partition
from .rules.loader import RuleSource, builtin_path, load_rules
from .rules.matcher import match

Rules = Optional[Union[RuleSource, Sequence[RuleSource]]]


@dataclass(frozen=True)
class Result:
    """What ``convert`` wrote, and where every node of the model went."""
    model_name: str
    out_dir: Path
    files: tuple
    manifest: Dict[str, Any]
    report: Dict[str, Any]

    @property
    def summary(self) -> Dict[str, int]:
        return dict(self.report["summary"])

    @property
    def placements(self) -> List[Dict[str, Any]]:
        return list(self.report["nodes"])

    def placement(self, node_name: str) -> Dict[str, Any]:
        for entry in self.report["nodes"]:
            if entry["name"] == node_name or entry.get("name_in_model") == node_name:
                return entry
        raise KeyError(node_name)


def convert(model: ModelLike, out_dir: Union[str, Path], *,
            shapes: Optional[Mapping[str, Sequence[int]]] = None, policy: str = "multi",
            rules: Rules = None, name: Optional[str] = None) -> Result:
    """Convert one ONNX model into the artifact directory ``out_dir`` (replaced if it exists)."""
    rule_list = load_rules(rules)
    loaded = load_model(model, shapes=shapes, name=name)
    try:
        canonical = canonicalize(loaded)
        _check_outputs(canonical.graph, loaded.label)
        matches = match(canonical.graph, rule_list)
        plan = partition(canonical.graph, matches, policy, loaded.name)
        subgraphs = {s.name: lower_stage(s) for s in plan.stages if s.kind == "mrvl"}
    except MrvlConvertError as exc:
        raise exc.attach_model(loaded.label)
    # Exporting copies every weight: only worth it when a CPU stage needs some of them.
    canonical_proto = None
    if any(s.kind == "cpu" for s in plan.stages):
        canonical_proto = gs.export_onnx(canonical.graph, do_type_check=False)
        canonical_proto.ir_version = loaded.proto.ir_version
    options = {"policy": policy,
               "shapes": {k: list(v) for k, v in sorted(loaded.input_shapes.items())},
               "rules": _rule_sources(rules)}
    out_dir = Path(out_dir)
    with StagingDir(out_dir, loaded.label) as staging:
        files: Dict[str, Dict[str, str]] = {}
        for stage in plan.stages:
            if stage.kind == "mrvl":
                nodes_doc, consts_doc = mrvl_json.build(subgraphs[stage.name])
                files[stage.name] = {"nodes_json": f"{stage.name}-nodes.json",
                                     "consts_json": f"{stage.name}-consts.json"}
                staging.write_json(files[stage.name]["nodes_json"], nodes_doc, "nodes")
                staging.write_json(files[stage.name]["consts_json"], consts_doc, "consts",
                                   compact=True)
            else:
                cpu_model = cpu_onnx.build(stage, canonical_proto)
                files[stage.name] = {"onnx": f"{stage.name}.onnx"}
                staging.write_onnx(files[stage.name]["onnx"], cpu_model,
                                   external=cpu_onnx.needs_external_data(cpu_model))
        manifest = documents.manifest(loaded, plan, subgraphs, files, options, __version__)
        report = documents.report(loaded, canonical, matches, plan, subgraphs)
        staging.write_json("manifest.json", manifest, "manifest")
        staging.write_json("report.json", report, "report")
        staging.publish()
        written = tuple(sorted(out_dir / f for f in staging.files))
    return Result(loaded.name, out_dir, written, manifest, report)


def _check_outputs(graph: gs.Graph, label: str) -> None:
    for tensor in graph.outputs:
        if isinstance(tensor, gs.Constant):
            raise UnsupportedModelError("is a constant once folded; there is nothing to run",
                                        model=label, tensor=tensor.name)


def _rule_sources(rules: Rules) -> List[Dict[str, str]]:
    if rules is None:
        rules = []
    elif isinstance(rules, (str, Path)):
        rules = [rules]
    sources = [{"name": "builtin", "sha256": _sha(builtin_path())}]
    for path in rules:
        sources.append({"name": Path(path).name, "sha256": _sha(Path(path))})
    return sources


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
