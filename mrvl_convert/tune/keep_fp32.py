"""fp16 with the layers fp16 costs most kept in fp32 on the CPU (``--keep-fp32 NODE|auto``).

The accelerator computes in fp16 (or int8) only, so a layer kept in fp32 runs on the CPU: the
named nodes are refused to the rules (``ConvertOptions.keep_fp32``, as ``deny`` does) and their
stage is an onnxruntime fp32 model. With ``auto``, the conversion without kept nodes is
verified; while it fails, the fp16 analysis of that conversion (``verify/fp16_analysis.py``,
made once: its figures are each layer's own, so keeping one layer does not change another's)
gives the next layer to keep, ``Fp16Analysis.candidates``' order (the layers whose fp16 weights
cost the outputs most first), all op nodes of the layer at once; convert and verify again, at
most ``max_rounds`` times. ``auto`` chooses on one part of the verify samples and reports the
verdict on the other (``core/samples.py`` ``remedy_split``): a verdict judged on the samples
that chose the layers says little (issue 40); both are reported. Every verdict and the analysis
are against the model ``mrvl-verify`` judges the artifact against (``judged_against``: the
float or requantized form another quantizer's model was converted from, kept in the artifact).

What it costs is measured, never estimated: the verify figures before (no node kept) and after
(the nodes kept), every round's, and report.json's ``keep_fp32`` section (convert's: the extra
Mrvl and CPU subgraphs, the extra Mrvl<->CPU cuts, the share of the MACs moved to the CPU),
which gets these figures as ``measured``. A round that does not lower the error by more than a
stated margin is undone, and the search stops after a few such rounds in a row
(``tune/keep_fp32_result.py`` states the criterion): the artifact keeps only the layers that
helped, and the line and report.json list what was tried and undone, with its figures.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from mrvl_convert.convert import convert_with
from mrvl_convert.core.artifact import read_json
from mrvl_convert.core.samples import (DEFAULT_VERIFY_SAMPLES, GIVEN, RANDOM, VERIFY_INPUTS,
                                       SampleOrigin, remedy_split)
from mrvl_convert.emit.publish import dumps, write_file_atomically
from mrvl_convert.emit.validate import validate
from mrvl_convert.errors import MrvlConvertError, OptionError
from mrvl_convert.frontend.foreign_kept import kept_reference
from mrvl_convert.options import ConvertOptions
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.tune.keep_fp32_result import (PATIENCE, KeepFp32Result, helps, undone_reason,
                                                worst_error)
from mrvl_convert.tune.keep_fp32_result import verify_figures as _figures
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.feeds import load_npz_feeds
from mrvl_convert.verify.fp16_analysis import Fp16Analysis, analyze_fp16
from mrvl_convert.verify.norm_scales import norm_scales
from mrvl_convert.verify.reference import default_feeds
from mrvl_convert.verify.report import Comparison, floor_excess
from mrvl_convert.verify.tolerances import Tolerances

AUTO = "auto"
DEFAULT_ROUNDS = 3
# The costliest layer's weights alone cost under this share of the failing error: no few
# layers hold it, and ``unreached`` says the error is spread (DEFAULT_ROUNDS layers of that
# cost could not remove half of it).
SPREAD = 0.1
PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class VerifySettings:
    """How each conversion is judged, as ``--verify`` judges it: the feeds (None:
    ``DEFAULT_VERIFY_SAMPLES`` seeded random ones; ``npz``: read from that file, as
    ``--verify-inputs`` is, once the first artifact gives the input shapes), the tolerances
    and the criterion."""

    inputs: Optional[List[Dict[str, Any]]] = None
    tolerances: Optional[Tolerances] = None
    criterion: str = "ours"
    npz: Optional[PathLike] = None

    source: str = GIVEN  # where ``inputs`` came from (core/samples.py's origin keys)
    model: Optional[PathLike] = None  # random feeds are drawn as it reads its inputs

    def run(self, model: PathLike, artifact: Path) -> Comparison:
        feeds = self.feeds(artifact)
        return compare(judged_against(model, artifact), artifact, feeds,
                       tolerances=self.tolerances,
                       criterion=self.criterion, origin=SampleOrigin(((self.source,
                                                                        len(feeds)),)))

    def feeds(self, artifact: Path) -> List[Dict[str, Any]]:
        """The samples judged: the given ones, the npz's, or ``DEFAULT_VERIFY_SAMPLES`` seeded
        random ones of the artifact's input shapes (made once)."""
        if self.inputs is None:
            specs = HybridSession(artifact).input_specs
            self.source = VERIFY_INPUTS if self.npz is not None else RANDOM
            self.inputs = load_npz_feeds(str(self.npz), specs) if self.npz is not None \
                else default_feeds(self.model, specs, 0, DEFAULT_VERIFY_SAMPLES)
        return self.inputs

    def split(self, artifact: Path) -> Tuple["VerifySettings", Optional["VerifySettings"]]:
        """``remedy_split`` of the samples: the settings that choose, and those that judge
        the choice out of sample (None with a single sample: nothing can be held out)."""
        choose, judge = remedy_split(len(self.feeds(artifact))).take(self.feeds(artifact))
        return (replace(self, inputs=choose, npz=None),
                replace(self, inputs=judge, npz=None) if judge else None)


def convert_keep_fp32(model: PathLike, out_dir: Optional[PathLike],
                      keep_fp32: Union[str, Sequence[str]], *,
                      options: Optional[ConvertOptions] = None,
                      verify: Optional[VerifySettings] = None,
                      max_rounds: int = DEFAULT_ROUNDS) -> KeepFp32Result:
    """Convert ``model`` (fp16) into ``out_dir`` with the nodes ``keep_fp32`` names kept in
    fp32 on the CPU and, with ``"auto"`` among them, the layers the fp16 analysis names until
    ``verify`` passes (module docstring); report.json's ``keep_fp32`` section gets the measured
    figures. ``out_dir`` None: only choose and measure (the command line converts after)."""
    names = [keep_fp32] if isinstance(keep_fp32, str) else list(keep_fp32)
    if max_rounds < 0:
        raise OptionError(f"max_rounds must be >= 0, got {max_rounds}")
    base = replace(options or ConvertOptions(), keep_fp32=())
    verify = replace(verify or VerifySettings(), model=model)
    kept = [n for n in names if n != AUTO]
    with tempfile.TemporaryDirectory(prefix="mrvl_keep_fp32_") as tmp:
        first = Path(tmp) / "none"
        convert_with(model, first, base)
        judge = None
        if AUTO in names:  # choose on one split, judge the choice on the other
            verify, judge = verify.split(first)
        check = verify.run(model, first)
        result = KeepFp32Result(Path(model).name, list(kept), _figures(check), _figures(check),
                                error=worst_error(check))
        if AUTO in names and not check.passed:
            result.analysis = analyze_fp16(judged_against(model, first), first, verify.inputs)
            result.overflow = list(check.overflow_nodes)
            base = _scale_norms(result, model, base, verify, Path(tmp))
        last = _rounds(result, model, base, verify, Path(tmp), max_rounds) or \
            result.scaled or first
        if AUTO in names:
            result.unreached = "" if result.after["passed"] else unreached(check, result)
            result.chosen_on = len(verify.feeds(first))
            result.held_out = None if judge is None else {
                "samples": len(judge.feeds(first)),
                "before": _figures(judge.run(model, first)),
                "after": _figures(judge.run(model, last))}
    if out_dir is not None:  # nothing kept: the plain fp16 conversion, which passes
        convert_with(model, out_dir, replace(base, keep_fp32=tuple(result.kept),
                                             norm_scales=result.norm_scales or None))
        record_measured(out_dir, result)
    return result


def unreached(check: Comparison, result: KeepFp32Result) -> str:
    """Why ``auto`` ended in FAIL, from what it measured: the fp16 floor outside tolerance
    already (every tensor rounded once fails), and what the costliest layer's fp16 weights
    alone cost the outputs against that: far less, and the error is spread over the layers,
    which keeping a few in fp32 cannot remove (slanet-plus: 78 layers, the costliest 49.5 dB)."""
    words = [f"auto did not reach PASS in {len(result.rounds)} round(s)"]
    over = [f"{r.tensor} {excess}" for r in check.judged_rows if not r.passed
            for excess in [floor_excess(r)] if excess]
    if over:
        words.append("the fp16 floor is itself outside tolerance (" + ", ".join(over[:2]) +
                     "): rounding the model's own tensors to fp16 once fails it")
    analysis = result.analysis
    costly = [] if analysis is None else analysis.costliest
    if costly:
        top, error = analysis.weights[costly[0].layer], result.before.get("max_rel")
        words.append(f"the costliest layer's fp16 weights alone cost the outputs max_rel "
                     f"{top.output_max_rel:.3g} ({top.output_snr_db:.1f} dB) of the "
                     f"{_rel(error)} failing, over {len(costly)} layer(s) whose weights cost "
                     "anything")
        if error is not None and top.output_max_rel < SPREAD * error:
            words[-1] += (": the error is spread over the layers, not in a few that keeping "
                          "in fp32 would remove")
    elif analysis is not None:
        words.append("the fp16 analysis names no layer whose weights or arithmetic cost it")
    return "; ".join(words)


def _rel(value: Optional[float]) -> str:
    return "max_rel ?" if value is None else f"max_rel {value:.3g}"


def judged_against(model: PathLike, artifact: Path) -> PathLike:
    """The model ``artifact`` is judged against, as ``mrvl-verify`` judges it: the model an
    artifact of another quantizer's model keeps (``foreign_kept.kept_reference``: requantized,
    or its dynamic int8 MatMuls as float ones), else ``model``. Judged against the model as
    given, the rewrite's own cost (T5's run-time uint8 activations: max_rel ~1 on 0/1 ids
    where the artifact is within 0.25 of its float form) counted as fp16's, and auto kept
    layers in fp32 that fp16 does not spoil."""
    return kept_reference(artifact) or model


def _scale_norms(result: KeepFp32Result, model: PathLike, base: ConvertOptions,
                 verify: VerifySettings, tmp: Path) -> ConvertOptions:
    """Where the model's own values overflow fp16, first the norms whose squares do are scaled
    by powers of two (``frontend/norm_range.py``, exact: no node moves to the CPU), chosen on
    the choosing samples (``verify/norm_scales.py``); the overflow left after, if any, is kept
    in fp32 by the rounds. ``base`` with those scales (as it was when none is chosen)."""
    if not result.overflow:
        return base
    scales = norm_scales(model, verify.inputs or [])
    if not scales:
        return base
    scaled = replace(base, norm_scales=scales)
    artifact = tmp / "scaled"
    convert_with(model, artifact, scaled)
    check = verify.run(model, artifact)
    result.norm_scales, result.scaled = scales, artifact
    result.after, result.overflow = _figures(check), list(check.overflow_nodes)
    result.error = worst_error(check)
    result.rounds.append({"layer": "(norm range)", "layer_name": "norms scaled by 2**-k",
                          "nodes": sorted(scales), "why": _SCALED, "verify": result.after})
    if check.passed:
        result.analysis = None  # nothing left to keep
    return scaled


_SCALED = ("their squares exceed fp16's largest, 65504: each norm's input scaled by a power of "
           "two, exact (frontend/norm_range.py)")


def _rounds(result: KeepFp32Result, model: PathLike, base: ConvertOptions,
            verify: VerifySettings, tmp: Path, max_rounds: int) -> Optional[Path]:
    """Convert and verify with the named nodes kept, then (``auto``) try the next candidate
    layer while verify fails, at most ``max_rounds`` rounds; a round that does not help
    (``keep_fp32_result.helps``) is undone, and ``PATIENCE`` of them in a row stop the search.
    A layer whose keeping the converter refuses (e.g. a node the partition cannot cut around)
    is recorded and skipped; a named node it refuses is the caller's error. The artifact of
    the nodes kept (None: no node kept)."""
    last = None
    if result.kept:
        last = tmp / "named"
        check, result.cost = _measure(model, base, verify, last, result.kept)
        result.after, result.error = _figures(check), worst_error(check)
        if check.passed:
            return last
    undone = 0
    for row in _candidates(result):
        added = [n for n in row.op_nodes if n not in result.kept]
        if not added:
            continue
        if len(result.rounds) == max_rounds:
            return last
        if undone == PATIENCE:
            result.stopped = f"stopped after {undone} rounds in a row undone"
            return last
        entry = {"layer": row.layer, "layer_name": row.layer_name, "nodes": list(row.op_nodes),
                 "why": getattr(row, "why", None) or _why(result.analysis, row)}
        result.rounds.append(entry)
        artifact = tmp / f"round{len(result.rounds)}"
        try:
            check, cost = _measure(model, base, verify, artifact, result.kept + added)
        except MrvlConvertError as exc:
            entry["refused"] = str(exc)
            continue
        entry.update(verify=_figures(check), cost=cost)
        now = worst_error(check)
        if not (check.passed or getattr(row, "needed", False) or helps(result.error, now)):
            entry["undone"], undone = undone_reason(result.error, now), undone + 1
            continue
        result.kept, result.cost, result.after = result.kept + added, cost, entry["verify"]
        last, result.error, undone = artifact, now, 0
        if check.passed:
            return last
    return last


def _candidates(result: KeepFp32Result) -> List[Any]:
    """The rows ``auto`` tries, in order: the model's own overflows first, all at once (no
    fp16 layer computes them, and each one alone makes the outputs inf or NaN whatever else
    is kept), then the analysis's candidates."""
    candidates = result.analysis.candidates() if result.analysis is not None else []
    return ([_Overflowing(result.overflow)] if result.overflow else []) + candidates


@dataclass
class _Overflowing:
    """The round keeping the nodes whose float32 values leave fp16's range."""

    op_nodes: List[str]
    layer: str = "(overflow)"
    layer_name: str = "the model's own fp16 overflow"
    why: str = "their float32 values exceed fp16's largest, 65504 (verify/fp16_overflow.py)"
    # Never undone: fp16 cannot hold their values, so no conversion that passes computes them
    # in fp16; their readers may still overflow on the way back (the outputs stay inf until a
    # later round keeps them: magika's head after its dense_2).
    needed: bool = True


def _measure(model: PathLike, base: ConvertOptions, verify: VerifySettings,
             artifact: Path, kept: List[str]) -> Tuple[Comparison, Dict[str, Any]]:
    """Convert with ``kept`` in fp32 and verify: the comparison, and what keeping them costs
    (report.json's ``keep_fp32`` section)."""
    converted = convert_with(model, artifact, replace(base, keep_fp32=tuple(kept)))
    return verify.run(model, artifact), dict(converted.report["keep_fp32"])


def _why(analysis: Optional[Fp16Analysis], row: Any) -> str:
    figures = None if analysis is None else analysis.weights.get(row.layer)
    if figures is not None and figures.output_snr_db is not None and \
            row in analysis.costliest:
        return f"its fp16 weights alone: {figures.output_snr_db:.1f} dB SNR at the outputs"
    return f"isolated SNR {row.isolated_snr_db:.1f} dB"


def record_measured(out_dir: PathLike, result: KeepFp32Result) -> None:
    """Add the measured figures to report.json's ``keep_fp32`` section (validated, atomic)."""
    path = Path(out_dir) / "report.json"
    report = read_json(path, "report", max_bytes=None)
    if "keep_fp32" not in report:
        section = _nothing_kept(result)
        if section is None:
            return
        report["keep_fp32"] = section
    report["keep_fp32"]["measured"] = result.measured
    validate(report, "report", label=str(path))
    write_file_atomically(path, dumps(report))


def _nothing_kept(result: KeepFp32Result) -> Optional[Dict[str, Any]]:
    """The section of an artifact that keeps no node after ``auto`` undid every round it
    measured (its figures: those of the conversion without kept nodes, which every round's
    ``without`` is), so report.json still says what was tried; None when nothing was."""
    costs = [r["cost"] for r in result.undone if r.get("cost")]
    if not costs:
        return None
    plain = costs[0]["without"]
    return {"nodes": [], "without": plain, "with": plain, "extra_mrvl_subgraphs": 0,
            "extra_cpu_subgraphs": 0, "extra_transitions": 0, "mac_share_moved": 0.0}
