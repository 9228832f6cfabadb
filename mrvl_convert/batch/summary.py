"""OUT/summary.json: one row per model directory in OUT, merged across runs.

A run replaces the rows of its own models and keeps the rows of earlier runs whose model
directory is still there; ``last_run`` names the models of the run that wrote the file. A row of
a verified model holds its verify figures (each output's errors and bounds).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

from mrvl_convert.version import __version__
from mrvl_convert.batch.outcome import COUNT_KEYS, FAILED, OK, SKIPPED, VERIFY_FAILED, Outcome
from mrvl_convert.errors import MrvlConvertError, OutputDirError

if TYPE_CHECKING:  # imported where verify runs: it loads onnxruntime
    from mrvl_convert.verify.compare import Comparison

PathLike = Union[str, os.PathLike]
SUMMARY_FILE = "summary.json"


def prepare_out_dir(out_dir: PathLike) -> Path:
    """Create out_dir (and parents); an OutputDirError if that is impossible."""
    out = Path(out_dir)
    blocker = next((p for p in [out, *out.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputDirError(f"cannot write the output directory {out}: {blocker} is a file, "
                             "not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"cannot write the output directory {out}: "
                             f"{exc.strerror or exc}") from None
    return out


def summary_document(result: Sequence[Outcome], *, seconds: float,
                     options: Mapping[str, Any],
                     earlier: Sequence[Mapping[str, Any]] = (),
                     one_device: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """summary.json's content (validated against schemas/summary.schema.json): the rows of
    ``earlier`` (kept rows of the summary already in OUT) with this run's rows replacing those
    of the same name, new ones after them; ``last_run`` names this run's models.
    ``one_device``: the run's models loaded together (``estimate.device.one_device``)."""
    rows = {o.name: _summary_row(o) for o in result}
    models = [rows.pop(e["name"], dict(e)) for e in earlier]
    models += [rows[o.name] for o in result if o.name in rows]
    totals = {"models": len(models)}
    totals.update({status: sum(m["status"] == status for m in models)
                   for status in (OK, FAILED, VERIFY_FAILED, SKIPPED)})
    document = {"format_version": "1", "tool_version": __version__, "options": dict(options),
                "totals": totals, "seconds": round(seconds, 3), "models": models,
                "last_run": [o.name for o in result]}
    if one_device is not None:
        document["one_device"] = dict(one_device)
    return document


def _summary_row(o: Outcome) -> Dict[str, Any]:
    written = o.converted
    entry: Dict[str, Any] = {"model": o.model, "name": o.name, "status": o.status,
                             "out_dir": o.name if written else None}
    entry.update({k: (o.counts.get(k) if written else None) for k in COUNT_KEYS})
    entry["mrvl_mac_share"] = o.mrvl_mac_share if written else None
    entry["mac_shares"] = dict(o.mac_shares) if written and o.mac_shares else None
    entry["codegen"] = _codegen(o.codegen) if written and o.codegen else None
    entry["fits_device"] = o.device["fits"] if written and o.device else None
    entry["device_reasons"] = list(o.device["reasons"]) if written and o.device else []
    if written and o.device and "int8_flow" in o.device:  # Marvell's pre-quantized rules
        flow = o.device["int8_flow"]
        entry["int8_flow"] = {"meets": flow["meets"], "reasons": list(flow["reasons"])}
    entry.update(seconds=round(o.seconds, 3), error=o.error, error_type=o.error_type,
                 internal_error=o.internal, verified=o.verified,
                 ignored_shapes=list(o.ignored_shapes))
    if o.verify is not None:
        entry["verify"] = {k: v for k, v in o.verify.items() if k != "line"}
    if o.traceback:
        entry["traceback"] = o.traceback
    return entry


def _codegen(codegen: Mapping[str, Any]) -> Dict[str, Any]:
    """summary.json's ``codegen``: the layer set whose codegen the artifact needs and the kinds
    beyond upstream v0.19's (manifest.json ``codegen`` has their layer counts and composites)."""
    return {"layer_set": codegen["layer_set"],
            "beyond_upstream": [k["kind"] for k in codegen["beyond_upstream"]]}


def earlier_rows(out_dir: PathLike) -> List[Dict[str, Any]]:
    """The rows of the summary.json already in out_dir whose model directory is still there
    (a manifest.json in it); none if there is no such file or it is not a summary we wrote."""
    out = Path(out_dir)
    try:
        document = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
        from mrvl_convert.emit.validate import validate
        validate(document, "summary", label=SUMMARY_FILE)
    except (OSError, ValueError, MrvlConvertError):
        return []
    return [row for row in document["models"]
            if row.get("out_dir") and (out / row["out_dir"] / "manifest.json").is_file()]


def write_summary(result: Sequence[Outcome], out_dir: PathLike, *, seconds: float,
                  options: Mapping[str, Any],
                  one_device: Optional[Mapping[str, Any]] = None) -> Path:
    """Merge with the summary already in out_dir (``summary_document``), validate and write
    out_dir/summary.json atomically (temp file + rename). The read-merge-write holds OUT's
    lock (``out_lock``, POSIX ``flock``), so runs finishing at once into one OUT keep each
    other's rows."""
    from mrvl_convert.emit.publish import dumps, out_lock, write_file_atomically
    from mrvl_convert.emit.validate import validate
    out = prepare_out_dir(out_dir)
    with out_lock(out):
        document = summary_document(result, seconds=seconds, options=options,
                                    earlier=earlier_rows(out), one_device=one_device)
        validate(document, "summary", label=SUMMARY_FILE)
        return write_file_atomically(out / SUMMARY_FILE, dumps(document))


def load_summary(out_dir: PathLike) -> Dict[str, Any]:
    return json.loads((Path(out_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))


def verify_figures(report: Comparison, inputs: Optional[str]) -> Dict[str, Any]:
    """What summary.json keeps of a comparison: the verdict, each output's errors, bounds and
    fp16 floor (the reference with every float tensor rounded to fp16: what fp16 costs),
    the boundary tensors over tolerance (diagnostics), the fp16 range events and, for an int8
    model, each output against the fp32 model (``fp32``: what quantization costs)."""
    outputs = []
    for row in report.judged_rows:
        tol = row.tolerance or {}
        outputs.append({"tensor": row.tensor, "passed": row.passed,
                        "max_abs": _finite(row.max_abs), "max_rel": _finite(row.max_rel),
                        "cosine": _finite(row.cosine), "top1": _finite(row.top1),
                        "atol": tol.get("atol"), "rtol": tol.get("max_rel"),
                        "note": row.note, "near_ties": row.near_ties,
                        "random_flips": row.random_flips,
                        "fp16_floor": None if row.floor_max_abs is None else {
                            "max_abs": _finite(row.floor_max_abs),
                            "max_rel": _finite(row.floor_max_rel),
                            "overflow": not math.isfinite(row.floor_max_abs)}})
    figures = {"passed": report.passed, "samples": report.samples,
               **({"origin": report.origin.to_dict()} if report.origin is not None else {}),
               "inputs": inputs or _inputs_word(report), "outputs": outputs,
               "boundaries_over": [r.tensor for r in report.boundaries_over],
               "fp16_range_events": list(report.range_events), "line": report.summary_line()}
    if report.floor_note:
        figures["fp16_floor_note"] = report.floor_note
    if report.fp32 is not None:  # an int8 verify's second reference: what quantization costs
        figures["reference"] = report.reference  # the first: the QDQ model, the verdict's
        figures["fp32"] = report.fp32.to_dict()
    return figures


def _inputs_word(report: Comparison) -> str:
    """"random", or the origins of the samples (``verify.origin`` gives the counts)."""
    origins = [k for k, n in (report.origin.counts if report.origin else ()) if n]
    return "+".join(origins) if origins and origins != ["random"] else "random"


def _finite(value: Optional[float]) -> Optional[float]:
    """JSON has no inf/NaN: a non-finite figure is written as null (the note says why)."""
    return None if value is None or not math.isfinite(value) else float(value)
