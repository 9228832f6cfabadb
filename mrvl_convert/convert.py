"""The whole flow for one model: load, canonicalize, match, partition, lower, emit."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Union

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.version import __version__
from mrvl_convert.emit import codegen, cpu_onnx, documents
from mrvl_convert.emit.mac_shares import mac_split
from mrvl_convert.emit.publish import StagingDir
from mrvl_convert.emit.stage_files import StageFiles, write_stages
from mrvl_convert.errors import (MrvlConvertError, NodeNotFoundError, OptionError,
                                 UnsupportedModelError)
from mrvl_convert.core.collection import paused_collection
from mrvl_convert.core.macs import total_macs
from mrvl_convert.estimate import estimate_documents, load_profile
from mrvl_convert.estimate.device import check_device
from mrvl_convert.estimate.profile import HardwareProfile
from mrvl_convert.estimate.region import region_weight
from mrvl_convert.frontend.canonicalize import CanonicalGraph, canonicalize
from mrvl_convert.frontend.foreign_cost import foreign_int8_section
from mrvl_convert.frontend.foreign_kept import kept_model
from mrvl_convert.frontend.load import LoadedModel, ModelLike, load_model
from mrvl_convert.frontend.shape_failures import opaque_nodes
from mrvl_convert.ir.layout import MrvlSubgraph
from mrvl_convert.ir.match import MatchPlan
from mrvl_convert.ir.stages import Plan
from mrvl_convert.layers import MARVELL, UPSTREAM
from mrvl_convert.lowering.lower import lower_stage
from mrvl_convert.options import ConvertOptions, Estimate, Rules, Shapes
from mrvl_convert.partition.plan import Ranking, partition
from mrvl_convert.quantize.recipe import Quantization, quantized_model
from mrvl_convert.rules.batch_axis import batch_runs, batchless_lifts, sequence_lifts
from mrvl_convert.rules.checks_shape import model_batch
from mrvl_convert.rules.loader import load_rules
from mrvl_convert.rules.matcher import match
from mrvl_convert.rules.float_spans import float_forms
from mrvl_convert.rules.int8_range import wide_float_spans
from mrvl_convert.rules.other_sets import layer_set_hints, set_verdicts

StageFn = Callable[[str], None]

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
            shapes: Optional[Shapes] = None, policy: str = "multi",
            rules: Rules = None, name: Optional[str] = None, layer_set: str = MARVELL,
            max_subgraphs: Optional[int] = None, deny: Sequence[str] = (),
            min_compute_layers: int = 1, estimate: Estimate = None, draw: bool = False,
            on_stage: Optional[StageFn] = None,
            quantize: Optional[Quantization] = None, keep_fp32: Sequence[str] = (),
            values: Optional[Mapping[str, Any]] = None,
            foreign_int8: str = "requantize",
            norm_scales: Optional[Mapping[str, int]] = None) -> Result:
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
    ``keep_fp32``: node names (as in report.json) of an fp16 conversion kept in fp32 on the
    CPU, where fp16 weights cost too much (issue 30); report.json's ``keep_fp32`` section says
    what that costs in stages, cuts and MACs. ``tune.keep_fp32`` chooses them (``auto``).
    ``values``: inputs pinned to one value for the conversion (``{"sr": 16000}``): what they
    decide is folded (an ``If`` on them becomes its branch); the artifact still takes them and
    computes what the model does for these values only (the manifest's ``options.values``).
    ``foreign_int8``: a QDQ model from another quantizer (per-channel weights, uint8 or
    zero-point activations, which the device's int8 cannot carry): ``"requantize"`` (default)
    brings it to per-tensor symmetric int8, ``"fp16"`` runs it as its float form; report.json's
    ``foreign_int8`` section says what was done and what it costs against the given model
    (``frontend/foreign_int8.py``).
    ``norm_scales``: norms (the name of their ReduceMean of squares) whose input is scaled by
    ``2**-k`` so their squares stay inside fp16's range (``frontend/norm_range.py``, exact
    barring underflow; ``verify.norm_scales.norm_scales`` chooses k from samples).
    """
    options = ConvertOptions(shapes=shapes, policy=policy, rules=rules, name=name,
                             layer_set=layer_set, max_subgraphs=max_subgraphs, deny=deny,
                             min_compute_layers=min_compute_layers, estimate=estimate,
                             draw=draw, quantize=quantize, keep_fp32=tuple(keep_fp32),
                             values=values, foreign_int8=foreign_int8,
                             norm_scales=norm_scales)
    return convert_with(model, out_dir, options, on_stage)


@paused_collection  # its objects live until it returns: full collections find little
def convert_with(model: ModelLike, out_dir: Union[str, Path], options: ConvertOptions,
                 on_stage: Optional[StageFn] = None,
                 on_publish: Optional[Callable[[], None]] = None,
                 feeds_for: Optional[Callable[[onnx.ModelProto], Any]] = None) -> Result:
    """``convert`` with its options as one object, as a batch worker holds them;
    ``on_publish()`` is called as the written directory is about to take its place
    (``StagingDir.publish``); ``feeds_for(loaded model)``: samples (verify's) another
    quantizer's requantization cost is measured on, or None for drawn ones."""
    step = on_stage or _no_step
    name, quantized = options.name, None
    if options.quantize is not None:
        step("quantize")
        model, name, quantized = quantized_model(model, options.quantize, name,
                                                 options.layer_set, options.shapes)
    step("load")
    rules = load_rules(options.rules, layer_set=options.layer_set)
    profile = _profile(options.estimate)
    loaded = load_model(model, shapes=options.shapes, name=name, values=options.values)
    foreign = requantized = None
    if quantized is None:  # our own recipe's QDQ is the device's int8 already
        loaded.proto, foreign, serialized = foreign_int8_section(
            loaded.proto, options.foreign_int8, feeds_for and feeds_for(loaded.proto),
            *float_forms(rules))
        # verify's reference, as the int8 QDQ model of --quantize (foreign_kept.py)
        requantized = kept_model(foreign, loaded.proto, loaded.name, serialized)
    try:
        canonical = canonicalize(loaded, norm_scales=options.norm_scales)
        _check_outputs(canonical.graph, loaded.label)
        step("match")
        device_limit = (profile or load_profile(None)).device.max_batch
        # The lifts of axes that are no batch run on CPU: Mrvl subgraphs get batch-1 boundaries
        # (a batchless input's [1, T, ...], a recurrent cell's sequence; batch_axis.py)
        batch = model_batch(canonical.graph)
        lifts = {**sequence_lifts(canonical.graph, device_limit, batch),
                 **batchless_lifts(canonical.graph, device_limit)}
        # a Loop onnx cannot infer, and what only it shapes, run on CPU (shape_failures.py)
        lifts.update(opaque_nodes(canonical.graph, loaded.shape_failures))
        lifts.update(wide_float_spans(canonical.graph))  # int8 beyond fp16's range: CPU
        denied = {**lifts, **_denied(canonical, loaded, options.deny)}
        kept = _kept_fp32(canonical, loaded, options.keep_fp32)
        # Without the nodes kept in fp32: the plan their cost is measured against.
        baseline = _plan(canonical, rules, denied, loaded, options, profile) if kept else None
        matches = match(canonical.graph, rules, deny={**denied, **kept})
        matches.unmatched_reason.update({k: v for k, v in lifts.items() if denied[k] == v})
        matches.elsewhere.update(layer_set_hints(canonical.graph, options.layer_set, matches,
                                                 {**denied, **kept}))
        # Before partition and lowering touch the graph: the codegen report's rule checks.
        upstream = set_verdicts(canonical.graph, matches.composites, UPSTREAM, rules)
        plan = partition(canonical.graph, matches, options.policy, loaded.name,
                         max_subgraphs=options.max_subgraphs,
                         min_compute_layers=options.min_compute_layers,
                         rank=_ranking(profile) if options.max_subgraphs is not None else None,
                         light=_interpolation(canonical))
        step("lower")
        subgraphs = {s.name: lower_stage(s, canonical.copies, _chunks(s, batch, device_limit))
                     for s in plan.stages if s.kind == "mrvl"}
    except MrvlConvertError as exc:
        raise exc.attach_model(loaded.label)
    step("emit")
    converted = _Converted(loaded, canonical, matches, plan, subgraphs,
                           None if baseline is None else
                           _keep_fp32_entry(options.keep_fp32, baseline, plan), upstream,
                           foreign, requantized, batch)
    return _emit(converted, Path(out_dir), options, profile, quantized, on_publish)


@dataclass(frozen=True)
class _Converted:
    """What the steps before emit made of one model."""
    loaded: LoadedModel
    canonical: CanonicalGraph
    matches: MatchPlan
    plan: Plan
    subgraphs: Dict[str, MrvlSubgraph]
    keep_fp32: Optional[Dict[str, Any]] = None   # report.json's section, with keep_fp32
    # node -> None where upstream v0.19's rules accept its composite, else why (codegen report)
    upstream: Optional[Dict[str, Optional[str]]] = None
    foreign_int8: Optional[Dict[str, Any]] = None   # report.json's section (another quantizer)
    requantized: Optional[Dict[str, Any]] = None    # the manifest's foreign_int8, with its bytes
    model_batch: Optional[int] = None   # checks_shape.model_batch, before lowering


def _emit(converted: _Converted, out_dir: Path, options: ConvertOptions,
          profile: Optional[HardwareProfile], kept: Optional[Dict[str, Any]],
          on_publish: Optional[Callable[[], None]] = None) -> Result:
    """Write the artifact directory, all of it or nothing: the stage files, manifest.json,
    report.json (with the estimate), the drawing and the QDQ model quantized."""
    loaded, plan, subgraphs = converted.loaded, converted.plan, converted.subgraphs
    with StagingDir(out_dir, loaded.label) as staging:
        stages = write_stages(staging, plan, subgraphs, converted.canonical, loaded,
                              options.layer_set)
        manifest = documents.manifest(loaded, plan, subgraphs, stages.files,
                                      options.manifest_entry(loaded.input_shapes), __version__,
                                      staging.digests)
        report = documents.report(loaded, converted.canonical, converted.matches, plan,
                                  subgraphs)
        if converted.keep_fp32 is not None:
            report["keep_fp32"] = converted.keep_fp32
        if converted.foreign_int8 is not None:
            report["foreign_int8"] = converted.foreign_int8
        documents_of = {name: docs[0] for name, docs in stages.mrvl.items()}
        manifest["codegen"] = codegen.needs(documents_of.values(), converted.upstream)
        # another quantizer's int8 requantized is an int8 conversion even where no layer
        # stayed int8 (dynamic MatMulIntegers run in fp16): its not_int8 says why
        int8_asked = kept is not None or (converted.foreign_int8 or {}).get("mode") == "requantize"
        report["precision"] = mac_split(plan, documents_of, report["nodes"],
                                        converted.canonical.derived, int8_asked,
                                        (kept or {}).get("keep_fp16", ()))
        if profile is not None:
            report["estimate"] = _estimate(manifest, stages, profile)
        # Every conversion: will it load on one device (the estimate's profile, or the built-in)?
        report["device"] = check_device(manifest, lambda name: stages.mrvl[name],
                                        profile or load_profile(None),
                                        estimate=report.get("estimate"),
                                        model_batch=converted.model_batch)
        graph = _describe(loaded, report)
        if options.draw:
            _draw(staging, loaded, report, graph)
        if kept is not None:
            staging.write_bytes(kept["file"], kept.pop("data"))
            manifest["quantization"] = kept
        if converted.requantized is not None:
            entry = dict(converted.requantized)
            staging.write_bytes(entry["file"], entry.pop("data"))
            manifest["foreign_int8"] = entry
        staging.write_json("manifest.json", manifest, "manifest")
        staging.write_json("report.json", report, "report")
        staging.publish(on_publish)
        written = tuple(sorted(out_dir / f for f in staging.files))
    return Result(loaded.name, out_dir, written, manifest, report, graph)


def _chunks(stage: Any, batch: int, device_limit: int) -> Optional[Any]:
    """(batch, device batch) of a Mrvl stage run in chunks of the model's ``batch``, or None."""
    runs = batch_runs(stage, batch, device_limit)
    return None if runs is None else (runs.batch, runs.device_batch)


def _no_step(stage: str) -> None:
    """No progress display."""


def _profile(estimate: Estimate) -> Optional[HardwareProfile]:
    """The hardware profile ``estimate`` asks for (read once per conversion), or None."""
    if estimate is None or estimate is False:
        return None
    return load_profile(None if estimate is True else estimate)


def _ranking(profile: Optional[HardwareProfile]) -> Optional[Ranking]:
    if profile is None:
        return None
    return Ranking("estimated accelerator time", region_weight(profile))


def _estimate(manifest: Dict[str, Any], stages: StageFiles, profile: HardwareProfile
              ) -> Dict[str, Any]:
    return estimate_documents(manifest, lambda e: stages.mrvl[e["name"]][0], profile,
                              const_shapes=lambda e: stages.mrvl[e["name"]][1])


def _describe(loaded: LoadedModel, report: Dict[str, Any]) -> Dict[str, Any]:
    from mrvl_convert.viz import describe
    return describe(loaded.proto, report, report.get("estimate"))


def _draw(staging: StagingDir, loaded: LoadedModel, report: Dict[str, Any],
          graph: Dict[str, Any]) -> None:
    from mrvl_convert.viz import annotate, render_page
    staging.write_bytes(f"{loaded.name}.html", render_page(graph).encode("utf-8"))
    annotated = annotate(loaded.proto, report, report.get("estimate"))
    staging.write_onnx(f"{loaded.name}.placement.onnx", annotated,
                       external=cpu_onnx.needs_external_data(annotated))


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


def _kept_fp32(canonical: CanonicalGraph, loaded: LoadedModel, names: Sequence[str]
               ) -> Dict[str, str]:
    """Canonical node name -> ``keep_fp32 NAME`` for the nodes ``names`` names (its unique
    name, or its name in the model file; a node canonicalize added answers to its origin's);
    an OptionError for a name no node left to run has."""
    wanted, kept, found = set(names), {}, set()
    for node in canonical.graph.nodes:
        origin = canonical.derived.get(node.name, node.name)
        hit = next((n for n in (origin, loaded.original_names.get(origin, origin))
                    if n in wanted), None)
        if hit is not None:
            kept[node.name] = f"keep_fp32 {hit}"
            found.add(hit)
    missing = [n for n in names if n not in found]
    if missing:
        raise OptionError(f"keep_fp32 {missing[0]!r}: no node of this name is left to run "
                          f"(nodes are named as in report.json)", model=loaded.label)
    return kept


def _plan(canonical: CanonicalGraph, rules: Any, denied: Dict[str, str], loaded: LoadedModel,
          options: ConvertOptions, profile: Optional[HardwareProfile]) -> Plan:
    """The partition ``options`` give with only ``denied`` refused."""
    matches = match(canonical.graph, rules, deny=denied)
    return partition(canonical.graph, matches, options.policy, loaded.name,
                     max_subgraphs=options.max_subgraphs,
                     min_compute_layers=options.min_compute_layers,
                     rank=_ranking(profile) if options.max_subgraphs is not None else None,
                     light=_interpolation(canonical))


def _interpolation(canonical: CanonicalGraph) -> Set[str]:
    """The nodes computing a linear Resize, a Pad or a reversed Slice rewritten into layers
    (frontend/linear_resize.py, pad_forms.py, slice_forms.py): not compute that makes a region
    worth the accelerator on its own (a Pad only moved toward its Conv is the Pad still)."""
    now = {node.name: node.op for node in canonical.graph.nodes}
    resizes = {name for name in canonical.rewritten
               if canonical.op_types.get(name) in ("Resize", "Upsample", "Slice")
               or canonical.op_types.get(name) == "Pad" and now.get(name) not in (None, "Pad")}
    return resizes | {name for name, origin in canonical.derived.items() if origin in resizes}


def _keep_fp32_entry(names: Sequence[str], baseline: Plan, plan: Plan) -> Dict[str, Any]:
    """What keeping ``names`` in fp32 costs: the stages, Mrvl<->CPU cuts and share of the
    MACs on Mrvl without them (``without``), and the change keeping them makes."""
    without, kept = _figures(baseline), _figures(plan)
    total = total_macs(n for s in plan.stages for n in s.nodes)
    return {"nodes": list(names), "without": without, "with": kept,
            "extra_mrvl_subgraphs": kept["mrvl_subgraphs"] - without["mrvl_subgraphs"],
            "extra_cpu_subgraphs": kept["cpu_subgraphs"] - without["cpu_subgraphs"],
            "extra_transitions": kept["transitions"] - without["transitions"],
            "mac_share_moved": round((without["mrvl_macs"] - kept["mrvl_macs"]) / total, 4)
            if total else 0.0}


def _figures(plan: Plan) -> Dict[str, int]:
    kinds = [s.kind for s in plan.stages]
    return {"mrvl_subgraphs": kinds.count("mrvl"), "cpu_subgraphs": kinds.count("cpu"),
            "transitions": sum(a != b for a, b in zip(kinds, kinds[1:])),
            "mrvl_macs": total_macs(n for s in plan.stages if s.kind == "mrvl" for n in s.nodes)}


def _check_outputs(graph: gs.Graph, label: str) -> None:
    for tensor in graph.outputs:
        if isinstance(tensor, gs.Constant):
            raise UnsupportedModelError("is a constant once folded; there is nothing to run",
                                        model=label, tensor=tensor.name)
