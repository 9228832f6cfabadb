"""How a model's multiply-accumulates split by where and how they run: int8 on the accelerator,
fp16 on the accelerator, on the CPU; and, for an int8 conversion, why the MACs not in int8 are not.

MACs are counted per node as ``core.macs`` counts them (Conv, ConvTranspose, Gemm, MatMul), on the
canonical graph the plan's stages hold, the same count as report.json's ``summary.macs``. A node
on the accelerator is int8 when the Nodes-JSON layer made from it carries int8 attributes
(``codegen.is_int8``); otherwise fp16.

Contract: requires the plan, the Nodes-JSON document of each Mrvl stage and report.json's node
entries of the same conversion; ensures the three MAC counts add up to ``summary.macs`` and
``not_int8`` (int8 conversions only: ``--quantize`` or a QDQ model) groups every MAC not in
int8 by its reason, most MACs first.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Sequence, Tuple

import onnx_graphsurgeon as gs

from mrvl_convert.core.macs import node_macs
from mrvl_convert.emit.codegen import is_int8
from mrvl_convert.ir.stages import Plan

INT8, FP16, CPU = "int8", "fp16", "cpu"
KEPT_FP16 = "kept in fp16 (--keep-fp16)"


def _int8_sources(documents: Mapping[str, Mapping[str, Any]]) -> Dict[str, bool]:
    """Node name -> whether the Mrvl layer made from it is int8."""
    int8: Dict[str, bool] = {}
    for document in documents.values():
        for node in document["nodes"]:
            if node["op"] == "tvm_op":
                sources = node["attrs"].get("source_nodes", [])
                int8.update(dict.fromkeys(sources, is_int8(node["attrs"])) if sources else ())
    return int8


def _entries_by_node(entries: Sequence[Mapping[str, Any]]) -> Dict[str, Mapping[str, Any]]:
    """Canonical node name -> its report entry (a merged node: the entry of the node it went
    into, the first one that names it)."""
    found: Dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        found.setdefault(entry.get("merged_into", entry["name"]), entry)
    return found


def _why_not_int8(entry: Mapping[str, Any], placement: str, kept: frozenset) -> str:
    if placement == CPU:
        return f"on CPU: {entry.get('reason', 'no rule matched')}"
    if {entry.get("name"), entry.get("name_in_model")} & kept:
        return KEPT_FP16
    return f"an fp16 layer ({entry.get('rule', 'no rule')}): no int8 form took it"


def mac_split(plan: Plan, documents: Mapping[str, Mapping[str, Any]],
              entries: Sequence[Mapping[str, Any]], derived: Mapping[str, str],
              quantized: bool, keep_fp16: Sequence[str] = ()) -> Dict[str, Any]:
    """report.json's ``precision``: MACs and MAC shares in int8 and fp16 on the accelerator and
    on the CPU; with ``quantized`` (or any int8 layer), ``not_int8``: per reason, the MACs it
    keeps out of int8 on the accelerator and the nodes (``derived``: a node canonicalize added
    -> its origin)."""
    entry_of = _entries_by_node(entries)
    macs = {INT8: 0, FP16: 0, CPU: 0}
    reasons: Dict[str, Dict[str, Any]] = {}
    for node, where, count in _mac_nodes(plan, _int8_sources(documents)):
        macs[where] += count
        if where == INT8:
            continue
        entry = entry_of.get(node.name) or entry_of.get(derived.get(node.name, ""), {})
        why = _why_not_int8(entry, where, frozenset(keep_fp16))
        group = reasons.setdefault(why, {"reason": why, "placement": where, "macs": 0,
                                         "nodes": []})
        group["macs"] += count
        group["nodes"].append(entry.get("name", node.name))
    total = sum(macs.values())
    section: Dict[str, Any] = {
        "macs": macs,
        "shares": {k: round(v / total, 4) if total else 0.0 for k, v in macs.items()}}
    if quantized or macs[INT8]:  # an int8 conversion, or a QDQ model given as it is
        section["not_int8"] = _ranked(reasons.values(), total)
    return section


def _mac_nodes(plan: Plan, int8_of: Mapping[str, bool]) -> Iterator[Tuple[gs.Node, str, int]]:
    """(node, int8 / fp16 / cpu, its MACs) for every node of the plan with MACs."""
    for stage in plan.stages:
        for node in stage.nodes:
            count = node_macs(node)
            if count:
                yield node, (CPU if stage.kind == "cpu" else
                             INT8 if int8_of.get(node.name) else FP16), count


def _ranked(groups: Any, total: int) -> List[Dict[str, Any]]:
    ranked = sorted(groups, key=lambda g: (-g["macs"], g["reason"]))
    for group in ranked:
        group["share"] = round(group["macs"] / total, 4) if total else 0.0
        group["nodes"] = sorted(set(group["nodes"]))
    return ranked
