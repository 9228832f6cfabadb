"""manifest.json and report.json: how the stages are wired, and where every original node went."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import dtype_name, static_shape
from mrvl_convert.core.macs import total_macs
from mrvl_convert.errors import ShapeError
from mrvl_convert.frontend.canonicalize import CanonicalGraph
from mrvl_convert.ir.layout import DEFAULT_LABELS, MrvlSubgraph
from mrvl_convert.frontend.load import LoadedModel
from mrvl_convert.ir.stages import Plan
from mrvl_convert.layers.qnn.forms import inexact_layers
from mrvl_convert.ir.match import MatchPlan

FORMAT_VERSION = "1"


def _io(value: onnx.ValueInfoProto, resolved: Optional[Mapping[str, List[int]]] = None,
        label: Optional[str] = None) -> Dict[str, Any]:
    """A model input or output; an output whose declared shape is not static takes the shape
    its stage computes (``resolved``: tensor -> the static shape of a stage boundary)."""
    tensor_type = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
             for d in tensor_type.shape.dim]
    static = tensor_type.HasField("shape") and all(isinstance(d, int) and d >= 0 for d in shape)
    if resolved is not None and not static:
        if value.name not in resolved:
            raise ShapeError(f"is a model output without a static shape ({shape}); the "
                             "artifact's outputs must have one", model=label, tensor=value.name)
        shape = list(resolved[value.name])
    return {"name": value.name, "shape": shape, "dtype": dtype}


def _as_given(entry: Dict[str, Any], dtypes: Mapping[str, str]) -> Dict[str, Any]:
    """A model input/output the model as given declares in another dtype than its stages
    compute it in (a float16 model: ``float16_model.py``): that dtype, and ``computed_as``."""
    given = dtypes.get(entry["name"])
    if given is None or given == entry["dtype"]:
        return entry
    return {**entry, "dtype": given, "computed_as": entry["dtype"]}


def _boundary(tensor: gs.Tensor, layout: Optional[str] = None,
              label: Optional[str] = None, dynamic: bool = False) -> Dict[str, Any]:
    """``dynamic``: a dim unknown may be None (null), where the rank is known."""
    shape = static_shape(tensor)
    if shape is None and dynamic and tensor.shape is not None:
        shape = [d if isinstance(d, int) and d >= 0 else None for d in tensor.shape]
    if shape is None:
        raise ShapeError(
            f"is a stage boundary without a static shape ({tensor.shape}): shape inference "
            "cannot tell it, and onnxruntime could not compute one that holds for every input "
            "(it depends on the input values, or the model does not run on zeros); keep it "
            "inside one stage (deny=... / --deny the nodes around it)", model=label,
            tensor=tensor.name)
    return {"tensor": tensor.name, "shape": shape, "dtype": dtype_name(tensor),
            "layout": layout or DEFAULT_LABELS.get(len(shape), "")}


def manifest(loaded: LoadedModel, plan: Plan, subgraphs: Mapping[str, MrvlSubgraph],
             files: Mapping[str, Mapping[str, str]], options: Dict[str, Any],
             tool_version: str, digests: Optional[Mapping[str, Mapping[str, str]]] = None
             ) -> Dict[str, Any]:
    """``digests``: {file written: {each file it is made of: sha256}} (``StagingDir.digests``),
    recorded as every stage's ``sha256``, so a reader can refuse a file changed since."""
    label = loaded.label
    stages = []
    read = {t.name for stage in plan.stages for t in stage.inputs}
    for stage in plan.stages:
        entry: Dict[str, Any] = {"kind": stage.kind, "name": stage.name}
        entry.update(files[stage.name])
        if digests is not None:
            entry["sha256"] = {part: digest for written in files[stage.name].values()
                               for part, digest in sorted(digests[written].items())}
        if stage.kind == "mrvl":
            sub = subgraphs[stage.name]
            entry["inputs"] = [_boundary(t, lay.name, label)
                               for t, lay in zip(sub.input_tensors, sub.input_layouts)]
            entry["layers"] = len(sub.layers)
            if sub.runs > 1:  # its layers take the batch in this many chunks of axis 0
                entry["runs"] = sub.runs
        else:
            entry["inputs"] = [_boundary(t, label=label) for t in stage.inputs]
            entry["nodes"] = len(stage.nodes)
        # a CPU stage's output no stage reads is a model output: it may keep a dim only the
        # run decides (a decoded sequence's length after a Loop, shape_failures.py)
        entry["outputs"] = [_boundary(t, label=label, dynamic=stage.kind == "cpu"
                                      and t.name not in read) for t in stage.outputs]
        stages.append(entry)
    resolved = {b["tensor"]: b["shape"] for s in stages for b in s["inputs"] + s["outputs"]}
    graph = loaded.proto.graph
    init_names = {t.name for t in graph.initializer}
    return {
        "format_version": FORMAT_VERSION,
        "tool_version": tool_version,
        "model": _model_entry(loaded, [_as_given(_io(v), loaded.boundary_dtypes)
                                       for v in graph.input if v.name not in init_names],
                              [_as_given(_io(v, resolved, label), loaded.boundary_dtypes)
                               for v in graph.output]),
        "options": options,
        "stages": stages,
    }


def _model_entry(loaded: LoadedModel, inputs: List[Dict[str, Any]],
                 outputs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The manifest's ``model``: the optional fields only when they say something, so the
    manifest of a model with a plain name and the shapes it declares stays as it was."""
    entry: Dict[str, Any] = {"name": loaded.name, "sha256": loaded.sha256,
                             "inputs": inputs, "outputs": outputs}
    if loaded.name_original is not None:
        entry["name_original"] = loaded.name_original
    if loaded.input_shape_overrides:
        entry["input_shape_overrides"] = {k: dict(v) for k, v in
                                          sorted(loaded.input_shape_overrides.items())}
    return entry


def report(loaded: LoadedModel, canonical: CanonicalGraph, matches: MatchPlan, plan: Plan,
           subgraphs: Mapping[str, MrvlSubgraph]) -> Dict[str, Any]:
    stage_of = plan.stage_of()
    layer_of: Dict[str, str] = {}
    for sub in subgraphs.values():
        for k, layer in enumerate(sub.layers):
            for name in layer.source_nodes:
                layer_of[name] = f"{sub.name}_{k}"
    rule_of = {n.name: c.rule for c in matches.composites for n in c.nodes}
    entries: List[Dict[str, Any]] = []
    counts = {"mrvl": 0, "cpu": 0, "removed": 0}
    origins = by_origin(canonical.derived)
    for index, node in enumerate(loaded.proto.graph.node):
        entry = _entry(node, index, loaded, canonical, matches, plan, stage_of, layer_of, rule_of,
                       origins)
        counts[entry["placement"]] += 1
        entries.append(entry)
    for entry in _branch_entries(len(entries), canonical, matches, plan, stage_of, layer_of,
                                 rule_of):
        counts[entry["placement"]] += 1
        entries.append(entry)
    summary = {"nodes": len(entries), "mrvl_nodes": counts["mrvl"],
               "cpu_nodes": counts["cpu"], "removed_nodes": counts["removed"],
               "mrvl_subgraphs": sum(s.kind == "mrvl" for s in plan.stages),
               "cpu_subgraphs": sum(s.kind == "cpu" for s in plan.stages)}
    summary.update(_fragmentation(plan))
    document = {
        "format_version": FORMAT_VERSION,
        "model": loaded.name,
        "policy": plan.policy,
        "summary": summary,
        "cut_by": _cut_by(entries, summary["mrvl_subgraphs"]),
        "nodes": entries,
    }
    inexact = [e for sub in subgraphs.values() for e in inexact_layers(sub)]
    if inexact:  # only int8 artifacts have any: float ones keep their bytes
        document["int8_forms"] = inexact
    if loaded.opset:  # an old-opset model: converted to a newer opset, or why not
        document["opset"] = dict(loaded.opset)
    return document


def _fragmentation(plan: Plan) -> Dict[str, Any]:
    """How often the run crosses between Mrvl and CPU, and how much of the work is on Mrvl."""
    kinds = [s.kind for s in plan.stages]
    macs = {kind: total_macs(n for s in plan.stages if s.kind == kind for n in s.nodes)
            for kind in ("mrvl", "cpu")}
    total = macs["mrvl"] + macs["cpu"]
    return {"transitions": sum(a != b for a, b in zip(kinds, kinds[1:])),
            "macs": total, "mrvl_macs": macs["mrvl"],
            "mrvl_mac_share": round(macs["mrvl"] / total, 4) if total else 0.0}


def _cut_by(entries: List[Dict[str, Any]], mrvl_subgraphs: int) -> List[Dict[str, Any]]:
    """The op types (as the model writes them) left on CPU, most nodes first: what cuts the
    accelerator's regions apart. Empty when nothing runs on Mrvl (nothing is cut)."""
    if not mrvl_subgraphs:
        return []
    counts: Dict[str, int] = {}
    for entry in entries:
        if entry["placement"] == "cpu":
            counts[entry["op_type"]] = counts.get(entry["op_type"], 0) + 1
    return [{"op_type": op, "nodes": n}
            for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _derived(name: str, stage_of: Mapping[str, Any], layer_of: Mapping[str, str],
             reasons: Mapping[str, str] = MappingProxyType({})) -> Dict[str, Any]:
    added: Dict[str, Any] = {"name": name, "stage": stage_of[name].name}
    if name in layer_of:
        added["layer"] = layer_of[name]
    elif name in reasons:  # on CPU: why (a batchless input's lift: batch_axis.py)
        added["reason"] = reasons[name]
    return added


def by_origin(derived: Mapping[str, str]) -> Dict[str, List[Tuple[int, str]]]:
    """origin -> [(position in ``derived``, added node)], in ``derived``'s order: each model
    node's entry reads its own, not all of ``derived`` (an unrolled model's thousands)."""
    origins: Dict[str, List[Tuple[int, str]]] = {}
    for position, (added, origin) in enumerate(derived.items()):
        origins.setdefault(origin, []).append((position, added))
    return origins


def derived_from(origins: Mapping[str, List[Tuple[int, str]]], names: Sequence[str]
                 ) -> List[str]:
    """The nodes derived from any of ``names``, in the order of the ``derived`` map that
    ``by_origin`` indexed: ``[a for a, o in derived.items() if o in names]``."""
    return [added for _, added in sorted(pair for origin in dict.fromkeys(names)
                                         for pair in origins.get(origin, ()))]


def _entry(node, index, loaded, canonical, matches, plan, stage_of, layer_of, rule_of,
           origins):
    name = node.name
    # the op as the file writes it (an opset upgrade may have made an Upsample a Resize)
    entry: Dict[str, Any] = {"index": index, "name": name,
                             "op_type": loaded.given_ops.get(name, node.op_type)}
    in_model = loaded.original_names.get(name, name)
    if in_model and in_model != name:
        entry["name_in_model"] = in_model
    if name in canonical.removed:
        entry.update(placement="removed", reason=canonical.removed[name])
        # A decided If is gone, its branch's nodes are not: say where they went.
        branch = [_derived(n, stage_of, layer_of) for n in derived_from(origins, [name])
                  if n in stage_of]
        entry.update({"derived": branch} if branch else {})
        return entry
    # A node merged into another by a canonical rewrite goes wherever that one went.
    name = canonical.merged.get(name, name)
    if name != node.name:
        entry["merged_into"] = name
    if name in canonical.rewritten:
        entry["canonical"] = canonical.rewritten[name]
    # a node merged into another keeps what was derived from it (sequence_lift's view)
    # (one a later cleanup dropped, its output read by nothing, is no longer anywhere)
    added_here = [added for added in derived_from(origins, [name, node.name])
                  if added in stage_of]
    # each one on CPU says why, as a node of the model does (an unrolled cell's step at a
    # batch its layer does not take)
    why = {added: _cpu_reason(added, matches, plan) for added in added_here
           if stage_of[added].kind != "mrvl"}
    derived = [_derived(added, stage_of, layer_of, why) for added in added_here]
    if derived:
        entry["derived"] = derived
    if name in canonical.kept:  # also on Mrvl, where a layer may compute what CPU could not
        entry["canonical"] = canonical.kept[name]
    return _placed(entry, name, matches, plan, stage_of, layer_of, rule_of)


def _branch_entries(start, canonical, matches, plan, stage_of, layer_of, rule_of
                    ) -> List[Dict[str, Any]]:
    """An entry of its own for each node that replaced a removed one (a decided If's branch):
    no node of the model stands for it, yet it runs on Mrvl or CPU, and why must be told."""
    op_of = {n.name: n.op for n in canonical.graph.nodes}
    entries = []
    for name, origin in canonical.derived.items():
        if origin not in canonical.removed or name not in stage_of:
            continue
        entry = {"index": start + len(entries), "name": name,
                 "op_type": op_of.get(name, "unknown"), "derived_from": origin}
        entries.append(_placed(entry, name, matches, plan, stage_of, layer_of, rule_of))
    return entries


def _placed(entry, name, matches, plan, stage_of, layer_of, rule_of) -> Dict[str, Any]:
    """``entry`` with where canonical node ``name`` runs, and why there."""
    stage = stage_of[name]
    entry["stage"] = stage.name
    if stage.kind == "mrvl":
        entry.update(placement="mrvl", rule=rule_of[name].name)
        if rule_of[name].note:
            entry["note"] = rule_of[name].note
        if name in layer_of:
            entry["layer"] = layer_of[name]
        else:
            entry["reason"] = "absorbed into the NHWC layout: no layer needed"
        return entry
    entry["placement"] = "cpu"
    entry["reason"] = _cpu_reason(name, matches, plan)
    if name in matches.near_miss and name not in plan.demoted:
        miss = matches.near_miss[name]
        entry["near_miss"] = {"rule": miss.binding.rule.name, "reason": miss.reason,
                              "nodes": [n.name for n in miss.binding.nodes],
                              "failed_on": list(miss.failed_nodes)}
    return entry


def _cpu_reason(name: str, matches, plan) -> str:
    """Why canonical node ``name`` runs on CPU: demoted, its near miss, or why no rule took it."""
    if name in plan.demoted:
        return plan.demoted[name]
    if name in matches.near_miss:
        miss = matches.near_miss[name]
        reason = f"{miss.binding.rule.name}: {miss.reason}"
    else:
        reason = matches.unmatched_reason.get(name, "no rule matched")
    return reason + (f"; {matches.elsewhere[name]}" if name in matches.elsewhere else "")
