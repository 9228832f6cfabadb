"""The ESTIMATE of a whole artifact: every Mrvl stage, and every tensor crossing a Mrvl boundary."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from mrvl_convert.core.file_hashes import check_stage_files
from mrvl_convert.core.paths import confined
from mrvl_convert.emit.validate import validate
from mrvl_convert.errors import ArtifactError
from mrvl_convert.core.artifact import read_json
from mrvl_convert.estimate.cost import StageEstimate, boundary_cycles, estimate_stage
from mrvl_convert.estimate.profile import HardwareProfile, ProfileLike, load_profile

NOTE = ("ESTIMATE from a roofline model of the MLIP (docs/ESTIMATE.md), calibrated on one public "
        "figure (ResNet-50 v1, 8 tiles, fp16); not a measurement. CPU stages are not estimated.")
HOST = "host"   # the application: it feeds the model's inputs and takes its outputs

NodesLoader = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def estimate_documents(manifest: Mapping[str, Any], load_nodes: NodesLoader,
                       profile: ProfileLike = None, *, tiles: Optional[int] = None,
                       const_shapes: Optional[Callable[[Mapping[str, Any]], Mapping]] = None
                       ) -> Dict[str, Any]:
    """The report.json ``estimate`` section: per stage, per layer, per boundary tensor.

    ``load_nodes(stage_entry)`` returns a Mrvl stage's Nodes-JSON document; ``const_shapes``
    (optional) returns {constant name: shape} for a stage, read only if a layer needs it.
    """
    prof = load_profile(profile)
    stages: List[Dict[str, Any]] = []
    estimates: Dict[str, StageEstimate] = {}
    for entry in manifest["stages"]:
        if entry["kind"] != "mrvl":
            stages.append({"name": entry["name"], "kind": "cpu", "cycles": None,
                           "microseconds": None})
            continue
        doc = load_nodes(entry)
        try:
            est = estimate_stage(doc, prof, tiles=tiles, name=entry["name"])
        except ArtifactError:
            if const_shapes is None:
                raise
            est = estimate_stage(doc, prof, tiles=tiles, name=entry["name"],
                                 const_shapes=const_shapes(entry))
        est = dataclasses.replace(est, runs=int(entry.get("runs", 1)))  # a chunked batch
        estimates[entry["name"]] = est
        stages.append(est.as_dict())
    boundaries = _boundaries(manifest, prof)
    mrvl = sum(e.cycles for e in estimates.values())
    transfer = sum(b["cycles"] for b in boundaries)
    us = 1e6 / prof.clock_hz
    return {"note": NOTE, "profile": prof.as_dict(),
            "tiles": tiles if tiles is not None else prof.tiles,
            "mrvl_cycles": round(mrvl), "mrvl_microseconds": round(mrvl * us, 3),
            "transfer_cycles": round(transfer), "transfer_microseconds": round(transfer * us, 3),
            "total_microseconds": round((mrvl + transfer) * us, 3),
            "matmul_macs": sum(e.macs for e in estimates.values()),
            "stages": stages, "boundaries": boundaries}


def _boundaries(manifest: Mapping[str, Any], prof: HardwareProfile) -> List[Dict[str, Any]]:
    """Every tensor that enters or leaves a Mrvl stage from or to something that is not Mrvl."""
    kind = {s["name"]: s["kind"] for s in manifest["stages"]}
    producer = {o["tensor"]: s["name"] for s in manifest["stages"] for o in s["outputs"]}
    crossings = []
    for stage in manifest["stages"]:
        for inp in stage["inputs"]:
            crossings.append((producer.get(inp["tensor"], HOST), stage["name"], inp))
    consumed = {i["tensor"] for s in manifest["stages"] for i in s["inputs"]}
    model_outputs = {o["name"] for o in manifest["model"]["outputs"]}
    for stage in manifest["stages"]:
        for out in stage["outputs"]:
            if out["tensor"] in model_outputs or out["tensor"] not in consumed:
                crossings.append((stage["name"], HOST, out))
    rows = []
    us = 1e6 / prof.clock_hz
    for src, dst, tensor in crossings:
        kinds = {kind.get(src, HOST), kind.get(dst, HOST)}
        if "mrvl" not in kinds or kinds == {"mrvl"}:
            continue
        elements = math.prod(int(d) for d in tensor["shape"])
        dtype = str(tensor.get("dtype", "float16"))
        cycles = boundary_cycles(elements, prof, dtype)
        rows.append({"tensor": tensor["tensor"], "from": src, "to": dst,
                     "cut": HOST not in (src, dst),
                     "bytes": int(elements * prof.precision(dtype).activation_bytes_per_element),
                     "cycles": round(cycles), "microseconds": round(cycles * us, 3)})
    return rows


def estimate_artifact(artifact_dir: Union[str, Path], profile: ProfileLike = None, *,
                      tiles: Optional[int] = None) -> Dict[str, Any]:
    """Estimate an artifact directory written by ``convert`` (parses its JSON files only).

    The files are read as ``HybridSession`` reads them: bounded, each checked against its schema,
    and every file the manifest names resolved inside ``artifact_dir``; as there, every stage
    file is first checked against the sha256 the manifest records (the CPU stages' too: an
    artifact changed after conversion is refused, not estimated).
    """
    root = Path(artifact_dir)
    manifest = _read(root, "manifest.json", "manifest", "manifest.json")
    check_stage_files(root, manifest, str(root / "manifest.json"))
    return estimate_documents(
        manifest, lambda e: _read(root, e["nodes_json"], "nodes", "Nodes-JSON"), profile,
        tiles=tiles, const_shapes=lambda e: _const_shapes(root, e["consts_json"]))


def _read(root: Path, relative: str, schema: str, what: str, **bounds: Any) -> Any:
    path = confined(root, relative, what=f"{root / 'manifest.json'}: a {what} path",
                    error=ArtifactError)
    doc = read_json(path, what, **bounds)
    validate(doc, schema, label=str(path))
    return doc


def _const_shapes(root: Path, relative: str) -> Dict[str, List[int]]:
    return {name: list(c["shape"]) for name, c in
            # weights are as large as the model's: no size bound, as for the simulator
            _read(root, relative, "consts", "Constants-JSON", max_bytes=None).items()}


def format_table(estimate: Mapping[str, Any], *, layers: bool = False) -> str:
    """The terminal table: a row per stage, the cuts' and the host transfers' totals, and the
    model's total; with ``layers``, also a row per Mrvl layer and per boundary tensor. The
    first two columns are as wide as their longest entry, so long stage and tensor names keep
    the figures aligned."""
    rows = _rows(estimate, layers)
    name_w = max([34] + [len(r[0]) + 2 for r in rows])
    kind_w = max([18] + [len(r[1]) + 2 for r in rows])
    lines = [f"ESTIMATE (not a measurement), profile {estimate['profile']['name']}, "
             f"{estimate['tiles']} tiles"]
    header = (f"{'stage / layer':<{name_w}}{'kind':<{kind_w}}{'MMACs':>10}{'weights KB':>12}"
              f"{'DDR KB':>10}{'est. us':>11}  bound")
    lines += [header, "-" * len(header)]
    lines += [f"{r[0]:<{name_w}}{r[1]:<{kind_w}}{r[2]:>10}{r[3]:>12}{r[4]:>10}{r[5]:>11}"
              f"{'  ' + r[6] if r[6] else ''}" for r in rows]
    lines.append(f"estimated accelerator time {estimate['mrvl_microseconds']:.1f} us, transfers "
                 f"{estimate['transfer_microseconds']:.1f} us, total "
                 f"{estimate['total_microseconds']:.1f} us (CPU stages not estimated)"
                 + ("" if layers else "; every layer: -v, or report.json"))
    return "\n".join(lines) + "\n"


def _rows(estimate: Mapping[str, Any], layers: bool) -> List[tuple]:
    """(label, kind, MMACs, weights KB, DDR KB, us, bound) per row, as text."""
    rows: List[tuple] = []
    for stage in estimate["stages"]:
        if stage["kind"] != "mrvl":
            rows.append((stage["name"], "(CPU stage)", "", "", "", "n/a", ""))
            continue
        rows.append((stage["name"], f"Mrvl stage, {len(stage['layers'])} layers",
                     f"{stage['matmul_macs'] / 1e6:.1f}", f"{stage['weight_bytes'] / 1024:.0f}",
                     f"{stage['ddr_bytes'] / 1024:.0f}", f"{stage['microseconds']:.1f}", ""))
        for layer in stage["layers"] if layers else ():
            rows.append(("  " + layer["layer"], layer["kind"], f"{layer['macs'] / 1e6:.1f}",
                         f"{layer['weight_bytes'] / 1024:.0f}", f"{layer['ddr_bytes'] / 1024:.0f}",
                         f"{layer['microseconds']:.1f}", layer["bound"]))
    if layers:
        for b in estimate["boundaries"]:
            what = "cut" if b["cut"] else "host i/o"
            rows.append((f"{what} {b['tensor']}", f"{b['from']}->{b['to']}", "", "",
                         f"{b['bytes'] / 1024:.0f}", f"{b['microseconds']:.1f}", ""))
        return rows
    # Totals: one row for all the cuts, one for the model's inputs and outputs.
    for cut, label, kind in ((True, "cuts", "Mrvl<->CPU"), (False, "host i/o", "host<->Mrvl")):
        group = [b for b in estimate["boundaries"] if b["cut"] == cut]
        if group:
            rows.append((f"{label} ({len(group)} tensors)", kind, "", "",
                         f"{sum(b['bytes'] for b in group) / 1024:.0f}",
                         f"{sum(b['microseconds'] for b in group):.1f}", ""))
    return rows
