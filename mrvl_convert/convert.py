"""The whole flow for one model: load, canonicalize, match, partition, layout, emit."""
from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import onnx_graphsurgeon as gs

from mrvl_convert.version import __version__
from mrvl_convert.frontend.canonicalize import CanonicalGraph, canonicalize
from mrvl_convert.emit import cpu_onnx, documents, mrvl_json
from mrvl_convert.emit.publish import StagingDir
from mrvl_convert.errors import MrvlConvertError, NodeNotFoundError, UnsupportedModelError
from mrvl_convert.frontend.load import LoadedModel, ModelLike, load_model
from mrvl_convert.lowering.lower import lower_stage
from mrvl_convert.partition.plan import Ranking, partition
from mrvl_convert.quantize.recipe import Quantization, quantized_model
from mrvl_convert.layers import MARVELL
from mrvl_convert.rules.loader import RuleSource, builtin_path, builtin_paths, load_rules
from mrvl_convert.rules.matcher import match
from mrvl_convert.rules.other_sets import layer_set_hints

Rules = Optional[Union[RuleSource, Sequence[RuleSource]]]


@dataclass(frozen=True)
class Result:
    """What ``convert`` wrote, and where every node of the model went."""
    model_name: str
    out_dir: Path
    files: tuple
    manifest: Dict[str, Any]
    report: Dict[str, Any]
    graph: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def draw(self, path: Union[str, Path]) -> Path:
        """Write the self-contained HTML page of the partition (``viz``) to ``path``."""
        from mrvl_convert.viz import render_page
        path = Path(path)
        path.write_text(render_page(self.graph), encoding="utf-8")
        return path

    @property
    def summary(self) -> Dict[str, Any]:
        """Node and subgraph counts, ``transitions`` (Mrvl<->CPU changes in run order),
        ``macs``, ``mrvl_macs`` and ``mrvl_mac_share`` (a fraction)."""
        return dict(self.report["summary"])

    @property
    def placements(self) -> List[Dict[str, Any]]:
        return list(self.report["nodes"])

    def placement(self, node_name: str) -> Dict[str, Any]:
        """The report entry of a node, by its name in report.json or in the model file; a
        NodeNotFoundError naming the closest names when there is no such node."""
        for entry in self.report["nodes"]:
            if entry["name"] == node_name or entry.get("name_in_model") == node_name:
                return entry
        names = sorted({n for e in self.report["nodes"]
                        for n in (e["name"], e.get("name_in_model")) if n})
        close = difflib.get_close_matches(node_name, names, n=5, cutoff=0.5)
        hint = (f"closest: {', '.join(map(repr, close))}" if close else
                f"it has {len(names)} nodes, e.g. {', '.join(map(repr, names[:5]))}")
        raise NodeNotFoundError(f"no node named {node_name!r} in this model ({hint}); "
                                "result.placements lists them all", model=self.model_name)


def convert(model: ModelLike, out_dir: Union[str, Path], *,
            shapes: Optional[Mapping[str, Sequence[int]]] = None, policy: str = "multi",
            rules: Rules = None, name: Optional[str] = None, layer_set: str = MARVELL,
            max_subgraphs: Optional[int] = None, deny: Sequence[str] = (),
            min_compute_layers: int = 1, estimate: Any = None, draw: bool = False,
            on_stage: Optional[Callable[[str], None]] = None,
            quantize: Optional[Quantization] = None) -> Result:
    """Convert one ONNX model into the artifact directory ``out_dir`` (replaced if it exists).

    ``layer_set``: the Marvell layer kinds the target backend compiler reads: ``"marvell"``
    (the newer codegen's set) or ``"upstream-0.19"`` (upstream TVM v0.19's twelve composites).
    ``max_subgraphs``: keep at most this many Mrvl subgraphs, those with the most MACs (with
    ``estimate``: the most estimated accelerator time); the rest run on CPU. ``deny``: op types
    or node names (as in the model or in report.json) that stay on CPU whatever the rules say.
    ``min_compute_layers``: a Mrvl region with fewer compute-heavy layers (Conv2D, FC...) goes
    back to CPU; 1 (default) is upstream's rule, 0 lets any matched region run on Mrvl.
    ``estimate``: True (built-in hardware profile) or a profile file adds the accelerator cost
    ESTIMATE to report.json (``estimate`` section). ``draw``: also write ``<name>.html`` (the
    partition page) and ``<name>.placement.onnx`` (the model annotated for Netron).
    ``on_stage(stage)`` is called as each step starts: ("quantize",) "load", "match", "lower",
    "emit" (for a progress display).
    ``quantize``: a :class:`~mrvl_convert.quantize.recipe.Quantization` quantizes the model first
    (Marvell's int8 recipe) and converts the QDQ model, which is kept in ``out_dir`` as
    ``<name>.int8.onnx`` (the manifest's ``quantization`` section).
    """
    step = on_stage or (lambda stage: None)
    kept = None
    if quantize is not None:
        step("quantize")
        model, name, kept = quantized_model(model, quantize, name, layer_set)
    step("load")
    rule_list = load_rules(rules, layer_set=layer_set)
    profile = _profile(estimate)
    deny = _check_deny(deny)
    loaded = load_model(model, shapes=shapes, name=name)
    try:
        canonical = canonicalize(loaded)
        _check_outputs(canonical.graph, loaded.label)
        step("match")
        denied = _denied(canonical, loaded, deny)
        matches = match(canonical.graph, rule_list, deny=denied)
        matches.elsewhere.update(layer_set_hints(canonical.graph, layer_set, matches, denied))
        plan = partition(canonical.graph, matches, policy, loaded.name,
                         max_subgraphs=max_subgraphs, min_compute_layers=min_compute_layers,
                         rank=_ranking(profile) if max_subgraphs is not None else None)
        step("lower")
        subgraphs = {s.name: lower_stage(s, canonical.copies) for s in plan.stages
                     if s.kind == "mrvl"}
    except MrvlConvertError as exc:
        raise exc.attach_model(loaded.label)
    # Exporting copies every weight: only worth it when a CPU stage needs some of them.
    canonical_proto = None
    if any(s.kind == "cpu" for s in plan.stages):
        canonical_proto = gs.export_onnx(canonical.graph, do_type_check=False)
        canonical_proto.ir_version = loaded.proto.ir_version
    options: Dict[str, Any] = {"policy": policy,
               "shapes": {k: list(v) for k, v in sorted(loaded.input_shapes.items())},
               "rules": _rule_sources(rules, layer_set), "layer_set": layer_set}
    if max_subgraphs is not None:
        options["max_subgraphs"] = max_subgraphs
    if deny:
        options["deny"] = list(deny)
    if min_compute_layers != 1:  # upstream's rule is not written: the manifest stays as it was
        options["min_compute_layers"] = min_compute_layers
    out_dir = Path(out_dir)
    step("emit")
    with StagingDir(out_dir, loaded.label) as staging:
        files: Dict[str, Dict[str, str]] = {}
        nodes_docs: Dict[str, Any] = {}
        for stage in plan.stages:
            if stage.kind == "mrvl":
                nodes_doc, consts_doc = mrvl_json.build(subgraphs[stage.name], layer_set)
                nodes_docs[stage.name] = (nodes_doc, {k: c["shape"] for k, c in consts_doc.items()})
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
        manifest = documents.manifest(loaded, plan, subgraphs, files, options, __version__,
                                      staging.digests)
        report = documents.report(loaded, canonical, matches, plan, subgraphs)
        if profile is not None:
            report["estimate"] = _estimate(manifest, nodes_docs, profile)
        graph = _describe(loaded, report)
        if draw:
            _draw(staging, loaded, report, graph)
        if kept is not None:
            staging.write_bytes(kept["file"], kept.pop("data"))
            manifest["quantization"] = kept
        staging.write_json("manifest.json", manifest, "manifest")
        staging.write_json("report.json", report, "report")
        staging.publish()
        written = tuple(sorted(out_dir / f for f in staging.files))
    return Result(loaded.name, out_dir, written, manifest, report, graph)


def _profile(estimate: Any) -> Any:
    """The hardware profile ``estimate`` asks for (read once per conversion), or None."""
    if estimate is None or estimate is False:
        return None
    from mrvl_convert.estimate import load_profile
    return load_profile(None if estimate is True else estimate)


def _ranking(profile: Any) -> Optional[Ranking]:
    if profile is None:
        return None
    from mrvl_convert.estimate.region import region_weight
    return Ranking("estimated accelerator time", region_weight(profile))


def _estimate(manifest: Dict[str, Any], nodes_docs: Dict[str, Any], profile: Any
              ) -> Dict[str, Any]:
    from mrvl_convert.estimate import estimate_documents
    return estimate_documents(manifest, lambda e: nodes_docs[e["name"]][0], profile,
                              const_shapes=lambda e: nodes_docs[e["name"]][1])


def _describe(loaded, report: Dict[str, Any]) -> Dict[str, Any]:
    from mrvl_convert.viz import describe
    return describe(loaded.proto, report, report.get("estimate"))


def _draw(staging: StagingDir, loaded, report: Dict[str, Any], graph: Dict[str, Any]) -> None:
    from mrvl_convert.viz import annotate, render_page
    staging.write_bytes(f"{loaded.name}.html", render_page(graph).encode("utf-8"))
    annotated = annotate(loaded.proto, report, report.get("estimate"))
    staging.write_onnx(f"{loaded.name}.placement.onnx", annotated,
                       external=cpu_onnx.needs_external_data(annotated))


def _check_deny(deny: Sequence[str]) -> List[str]:
    if isinstance(deny, str) or not all(isinstance(d, str) and d for d in deny):
        raise MrvlConvertError(f"deny must be a list of op types or node names, got {deny!r}")
    return sorted(set(deny))


def _denied(canonical: CanonicalGraph, loaded: LoadedModel, deny: Sequence[str]) -> Dict[str, str]:
    """Canonical node name -> the deny entry naming it: by its op type (as in the model or
    after canonicalize), its unique name, or its name in the model file; a node canonicalize
    added answers to the names of the node it comes from."""
    wanted = set(deny)
    denied: Dict[str, str] = {}
    for node in canonical.graph.nodes:
        origin = canonical.derived.get(node.name, node.name)  # a Sum's partial Adds: the Sum
        names = (node.op, canonical.op_types.get(origin, node.op), origin,
                 loaded.original_names.get(origin, origin))
        hit = next((n for n in names if n in wanted), None)
        if hit is not None:
            denied[node.name] = hit
    return denied


def _check_outputs(graph: gs.Graph, label: str) -> None:
    for tensor in graph.outputs:
        if isinstance(tensor, gs.Constant):
            raise UnsupportedModelError("is a constant once folded; there is nothing to run",
                                        model=label, tensor=tensor.name)


def _rule_sources(rules: Rules, layer_set: str) -> List[Dict[str, str]]:
    if rules is None:
        rules = []
    elif isinstance(rules, (str, Path)):
        rules = [rules]
    sources = [{"name": "builtin" if path == builtin_path() else f"builtin/{path.name}",
                "sha256": _sha(path)} for path in builtin_paths(layer_set)]
    for path in rules:
        sources.append({"name": Path(path).name, "sha256": _sha(Path(path))})
    return sources


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
