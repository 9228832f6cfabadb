"""Mixed precision: int8 with the layers that quantize worst kept in fp16 (``--keep-fp16``).

The named float-model nodes (or, with ``auto``, the op nodes of the layers whose isolated SNR
is below the threshold, worst first, one Conv2D or FC layer a round for a bounded number of
rounds) are left out of quantization (``quantize_static``'s ``nodes_to_exclude``). The QDQ
model then has a float op between a DequantizeLinear and a QuantizeLinear: the converter makes
it an fp16 Mrvl layer with ``quant`` layers at the region boundary (int8 -> float32 in front,
float32 -> int8 after), in the same accelerator stage. The float rules of Conv, Gemm and
MatMul take a dequantized input as they take any float32 one; the elementwise float rules
refuse to sit inside an int8 region (``float_region``), which does not arise here since an
excluded node has no QDQ pair around its own output.

With a target top-1 agreement (``min_agreement``, ``--min-agreement``) ``auto`` is a search
judged out of sample (issue 40): the calibration samples are split once
(``core.samples.remedy_split``); the **choice** part calibrates every trial model, ranks the
layers and decides each step, the **held-out** part only judges, so the figure reported is on
samples that chose nothing.

- rank: the int8 Conv2D/FC layers, first by the noise their isolated SNR says they add per
  multiply-accumulate (``verify/quant_analysis.py``), then by their measured sensitivity: the
  output noise the model loses with that layer alone in fp16, on the choice samples, per
  multiply-accumulate (``tune/prefix_search.py``);
- bisect: the shortest prefix of that ranking whose choice-sample top-1 agreement reaches the
  target, in at most ``max_rounds`` tries (the whole ranking first);
- judge: the agreement of the chosen model on the held-out samples. ``reached`` is that figure
  against the target; not reaching it is an outcome the result states, not an error. Each
  prefix's held-out figure is recorded too (the curve of agreement against int8 MAC share), but
  never decides anything.

The float model's nodes are named first (``load.name_nodes``), as the converter names them, so
that the names ``--keep-fp16`` takes, the names the report gives and the names
``quantize_static`` matches are the same ones.

- requires: a float model, its calibration samples (with a target: at least 2, and an output
  with a last axis of 2 or more), the conversion options its trial models take (shapes);
- ensures: ``out`` is the QDQ model with ``result.kept`` left in float (with a target: the
  kept model the verdict is of, calibrated on the choice samples); with a target, ``reached``
  and every figure reported on the held-out samples come from samples that decided nothing.
"""
from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from mrvl_convert.convert import convert_with
from mrvl_convert.errors import OptionError
from mrvl_convert.options import ConvertOptions
from mrvl_convert.core.macs import node_macs
from mrvl_convert.core.samples import SampleSplit, remedy_split
from mrvl_convert.frontend.load import load_model
from mrvl_convert.quantize.keep import ANALYSIS_SAMPLES, AUTO, analysis_feeds, named_copy
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.tune.agreement import (Agreement, describe, measure, reference_outputs,
                                         stage_counts)
from mrvl_convert.tune.prefix_search import Point, Ranked, bisect, rank, share
from mrvl_convert.verify.quant_analysis import (DEFAULT_THRESHOLD_DB, KEEPABLE_LAYERS,
                                                QuantAnalysis, analyze_quantization)
from mrvl_convert.verify.quant_report import LayerQuality

DEFAULT_ROUNDS = 3
DEFAULT_TARGET_ROUNDS = 8  # with min_agreement: prefixes tried (quantize, convert, measure each)
PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class Round:
    """A layer ``auto`` gave back to fp16 and the float-model nodes it is made of. With a
    target (a layer of the chosen prefix): its multiply-accumulates and its measured
    sensitivity, the output SNR on the choice samples with it alone in fp16."""

    layer: str
    layer_name: str
    isolated_snr_db: float
    nodes: List[str]
    accepted: bool = True
    macs: int = 0
    output_snr_db: Optional[float] = None


@dataclass
class KeepFp16Result:
    """The QDQ model written, the float-model nodes left in float, the ``auto`` rounds and
    the analysis of the last conversion (``auto`` only). With a target: the figures of the
    int8 model alone (``*_before``) and of the kept one, on the choice samples
    (``agreement``) and the held-out ones (``held_out``, the verdict)."""

    model: Path
    kept: List[str]
    rounds: List[Round] = field(default_factory=list)
    analysis: Optional[QuantAnalysis] = None
    min_agreement: Optional[float] = None
    agreement_before: Optional[float] = None
    agreement: Optional[float] = None
    samples: int = 0
    stages_before: Dict[str, int] = field(default_factory=dict)
    stages_after: Dict[str, int] = field(default_factory=dict)
    held_out_before: Optional[float] = None
    held_out: Optional[float] = None
    held_out_samples: int = 0
    int8_mac_share_before: Optional[float] = None
    int8_mac_share: Optional[float] = None
    snr_db: Optional[float] = None
    # With a target: the calibration rows that calibrate ``model`` (the choice samples) and those
    # the held-out figure is measured on, as indices into the calibration data given.
    calibration_rows: List[int] = field(default_factory=list)
    held_out_rows: List[int] = field(default_factory=list)
    # With a target: the candidates as ranked (measured sensitivity) and every prefix tried.
    ranking: List[Ranked] = field(default_factory=list)
    curve: List[Point] = field(default_factory=list)

    @property
    def reached(self) -> bool:
        """Whether the held-out agreement reaches ``min_agreement`` (False without one)."""
        return (self.min_agreement is not None and self.held_out is not None
                and self.held_out >= self.min_agreement)

    @property
    def added(self) -> List[Round]:
        return [r for r in self.rounds if r.accepted]

    def to_dict(self) -> Dict[str, object]:
        """What the target cost, for the manifest's ``quantization.keep_fp16_auto``."""
        return {"min_agreement": self.min_agreement, "reached": self.reached,
                "held_out": self.held_out, "held_out_before": self.held_out_before,
                "held_out_samples": self.held_out_samples,
                "agreement": self.agreement, "agreement_before": self.agreement_before,
                "samples": self.samples,
                "int8_mac_share": self.int8_mac_share,
                "int8_mac_share_before": self.int8_mac_share_before,
                "layers": [r.layer for r in self.added],
                "nodes": [n for r in self.added for n in r.nodes],
                "rounds": len(self.curve),
                "ranking": [r.to_dict() for r in self.ranking],
                "curve": [p.to_dict() for p in sorted(self.curve, key=lambda p: p.prefix)],
                "stages_before": dict(self.stages_before),
                "stages_after": dict(self.stages_after),
                "calibration_rows": list(self.calibration_rows),
                "held_out_rows": list(self.held_out_rows)}

    def summary(self) -> str:
        """One line: the target, the held-out figure (the verdict) and the choice one, the
        layers kept, the int8 MAC share and the subgraphs."""
        if self.min_agreement is None:
            return ""
        nodes = ", ".join(n for r in self.added for n in r.nodes) or "none"
        share = "-" if self.int8_mac_share is None else f"{self.int8_mac_share:.3f}"
        return (f"{describe(self.held_out, self.min_agreement, self.reached)} on "
                f"{self.held_out_samples} held-out sample(s) (int8 alone "
                f"{_fmt(self.held_out_before)}); on the {self.samples} sample(s) that chose the "
                f"layers {_fmt(self.agreement)} (int8 alone {_fmt(self.agreement_before)}); "
                f"{len(self.added)} layer(s) kept in fp16 ({nodes}) of {len(self.ranking)} "
                f"ranked; int8 MAC share {share}; subgraphs {_stages(self.stages_before)} -> "
                f"{_stages(self.stages_after)}; curve {self.curve_text()}")

    def curve_text(self) -> str:
        """Each prefix tried, by length: int8 MAC share -> held-out agreement."""
        points = sorted(self.curve, key=lambda p: p.prefix)
        return ", ".join(f"{p.prefix}: {_fmt(p.int8_mac_share)} -> {_fmt(p.held_out)}"
                         for p in points) or "-"


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4f}"


def _stages(counts: Mapping[str, int]) -> str:
    return f"{counts.get('mrvl', 0)} Mrvl / {counts.get('cpu', 0)} CPU"


def quantize_keep_fp16(model: PathLike, out: PathLike, calibration: Mapping[str, np.ndarray],
                       keep_fp16: Union[str, Sequence[str]], *,
                       inputs: Optional[Sequence[Dict]] = None,
                       threshold_db: Optional[float] = None, max_rounds: Optional[int] = None,
                       options: Optional[ConvertOptions] = None, method: str = "minmax",
                       min_agreement: Optional[float] = None, equalize: bool = False,
                       bias_correction: bool = False) -> KeepFp16Result:
    """``model`` quantized to ``out`` as ``quantize_int8`` does, but the nodes ``keep_fp16``
    names left in float, and with ``"auto"`` among them, the worst layers too (module
    docstring). ``inputs``: the feeds the ``auto`` analysis runs without a target (default:
    calibration samples); ``options``: the options of its conversions (of a QDQ model: their
    ``quantize`` is not used; their ``shapes`` fix the model's free dims); ``method``: the
    calibration method (``quantize.CALIBRATION_METHODS``); ``min_agreement``: the top-1
    agreement with the fp32 model ``auto`` searches for, judged on held-out calibration
    samples (module docstring; ``max_rounds`` then defaults to ``DEFAULT_TARGET_ROUNDS``;
    ``out`` is then calibrated on the choice samples, the model the verdict is of);
    ``equalize``, ``bias_correction``: as ``quantize_int8``."""
    if isinstance(keep_fp16, str):
        keep_fp16 = [keep_fp16]  # one name, not its letters
    _check_target(min_agreement, AUTO in keep_fp16, inputs)
    if max_rounds is None:
        max_rounds = DEFAULT_ROUNDS if min_agreement is None else DEFAULT_TARGET_ROUNDS
    if max_rounds < 0:
        raise OptionError(f"max_rounds must be >= 0, got {max_rounds}")
    out = Path(out)
    options = replace(options or ConvertOptions(), quantize=None)
    with tempfile.TemporaryDirectory(prefix="mrvl_keep_fp16_") as tmp:
        named = Path(tmp) / Path(model).name
        auto = AUTO in keep_fp16
        kept = [n for n in keep_fp16 if n != AUTO]
        named_copy(model, named, kept)
        result = KeepFp16Result(out, kept, min_agreement=min_agreement)
        threshold = DEFAULT_THRESHOLD_DB if threshold_db is None else threshold_db
        if auto and min_agreement is not None:
            _search(result, named, calibration, threshold, max_rounds, options, Path(tmp),
                    functools.partial(quantize_int8, method=method, equalize=equalize,
                                      bias_correction=bias_correction))
            return result
        quantize = functools.partial(quantize_int8, named, out, calibration, method=method,
                                     equalize=equalize, bias_correction=bias_correction)
        quantize(exclude=kept)
        if auto:
            feeds = list(inputs) if inputs is not None else analysis_feeds(named, calibration)
            _auto(result, named, quantize, feeds, threshold, max_rounds, options, Path(tmp))
    return result


def _check_target(min_agreement: Optional[float], auto: bool, inputs: Optional[Sequence]
                  ) -> None:
    if min_agreement is None:
        return
    if not auto:
        raise OptionError("min_agreement (--min-agreement) is only used with keep_fp16 'auto'")
    if not 0.0 < min_agreement <= 1.0:
        raise OptionError(f"min_agreement must be in (0, 1], got {min_agreement}")
    if inputs is not None:
        raise OptionError("min_agreement: the search chooses on one part of the calibration "
                          "samples and judges on the other; it takes no other inputs")


def _auto(result: KeepFp16Result, named: Path, quantize: Callable[..., Path],
          feeds: List[Dict], threshold: float, max_rounds: int, options: ConvertOptions,
          tmp: Path) -> None:
    """Without a target: convert, analyse, give the worst compute layer below the threshold
    back to float, quantize again; at most ``max_rounds`` times. The last analysis is the
    final model's."""
    for k in range(max_rounds + 1):
        artifact = tmp / f"round{k}"
        convert_with(result.model, artifact, options)
        result.analysis = analyze_quantization(named, artifact, feeds, threshold_db=threshold)
        worst = _candidate(result.analysis, result.kept) if k < max_rounds else None
        if worst is None:
            break
        result.rounds.append(_round(worst))
        result.kept += [n for n in worst.op_nodes if n not in result.kept]
        quantize(exclude=result.kept)


@dataclass
class _Trial:
    """Converts a QDQ model of ``named`` with some nodes in float and measures it on both
    splits against the fp32 outputs computed once."""

    named: Path
    out: Path
    quantize: Callable[..., Path]
    options: ConvertOptions
    tmp: Path
    choose: List[Dict]
    judge: List[Dict]
    references: tuple
    count: int = 0

    def run(self, kept: Sequence[str], judge: bool = True) -> tuple:
        """(choice Agreement, held-out Agreement or None, stages, artifact) of ``kept`` in
        float; ``judge=False``: the choice samples only (a sensitivity trial)."""
        self.quantize(exclude=list(kept))
        artifact = self.tmp / f"trial{self.count}"
        self.count += 1
        convert_with(self.out, artifact, self.options)
        chosen = measure(artifact, self.choose, self.references[0])
        held = measure(artifact, self.judge, self.references[1]) if judge else None
        return chosen, held, stage_counts(artifact), artifact


def _search(result: KeepFp16Result, named: Path, calibration: Mapping[str, np.ndarray],
            threshold: float, max_rounds: int, options: ConvertOptions, tmp: Path,
            quantize_with: Callable[..., Path]) -> None:
    """The held-out search (module docstring, ``tune/prefix_search.py``)."""
    given, rows = _split(calibration, named)
    choose_cal, judge_cal = rows.take_stacked(given)
    choose = analysis_feeds(named, choose_cal, count=_count(choose_cal))
    judge = analysis_feeds(named, judge_cal, count=_count(judge_cal))
    # Every trial, and so the model written, is calibrated on exactly the choice rows: the
    # artifact made with those rows (Quantization.rows) is the model the held-out figure is of.
    result.calibration_rows, result.held_out_rows = list(rows.choose), list(rows.judge)
    trial = _Trial(named, result.model, functools.partial(  # one calibration run, its ranges kept
        quantize_with, named, result.model, given, rows=rows.choose, ranges=tmp / "ranges.json"),
                   options, tmp, choose, judge,
                   (reference_outputs(named, choose), reference_outputs(named, judge)))
    macs = _node_macs(named, choose[0])
    total = sum(macs.values())
    base, held, stages, artifact = trial.run(result.kept)
    _need_top1(base)
    result.agreement_before, result.held_out_before = base.value, held.value
    result.samples, result.held_out_samples = _samples(choose), _samples(judge)
    result.stages_before = stages
    result.int8_mac_share_before = share(result.kept, macs, total)
    result.analysis = analyze_quantization(named, artifact, choose[:ANALYSIS_SAMPLES],
                                           threshold_db=threshold)
    start = _point(0, result.kept, base, held, macs, total, result.min_agreement)
    stages_of = {0: stages}
    if start.reaches or max_rounds == 0:
        ranked: List[Ranked] = []
    else:
        ranked = rank([Ranked(r, _layer_macs(r, macs))
                       for r in _ranked(result.analysis, result.kept, macs)], base,
                      lambda row: trial.run(result.kept + row.op_nodes, judge=False)[0])
    result.ranking = ranked

    def prefix_nodes(k: int) -> List[str]:
        return result.kept + [n for r in ranked[:k] for n in r.row.op_nodes
                              if n not in result.kept]

    def try_prefix(k: int) -> Point:
        got, held_k, stages_of[k], _ = trial.run(prefix_nodes(k))
        return _point(k, prefix_nodes(k), got, held_k, macs, total, result.min_agreement)

    chosen, result.curve = bisect(len(ranked), max_rounds, try_prefix, start)
    result.rounds = [_round(r.row, r) for r in ranked[:chosen.prefix]]
    result.kept = prefix_nodes(chosen.prefix)
    result.stages_after = stages_of[chosen.prefix]
    if result.curve and result.curve[-1].prefix != chosen.prefix:
        trial.quantize(exclude=result.kept)  # the model written is the chosen one
    result.agreement, result.held_out = chosen.agreement, chosen.held_out
    result.snr_db, result.int8_mac_share = chosen.snr_db, chosen.int8_mac_share


def _point(k: int, kept: Sequence[str], got: Agreement, held: Agreement,
           macs: Mapping[str, int], total: int, target: float) -> Point:
    return Point(k, share(kept, macs, total), got.value, held.value, got.snr_db,
                 got.value is not None and got.value >= target, got.key())


def _split(calibration: Mapping[str, np.ndarray], named: Path
           ) -> "tuple[Dict[str, np.ndarray], SampleSplit]":
    """The calibration samples (as many of each input) and their (choice, held-out) rows, by
    ``remedy_split``."""
    arrays = {k: np.asarray(v) for k, v in calibration.items()}
    count = min((len(a) for a in arrays.values()), default=0)
    if count < 2:
        raise OptionError(f"min_agreement: {named.name} has {count} calibration sample(s); "
                          "the search needs at least 2, to hold some out of the choice")
    return {k: a[:count] for k, a in arrays.items()}, remedy_split(count)


def _count(calibration: Mapping[str, np.ndarray]) -> int:
    return min(len(a) for a in calibration.values())


def _samples(feeds: Sequence[Mapping[str, np.ndarray]]) -> int:
    return sum(len(next(iter(f.values()))) for f in feeds if f)


def _need_top1(agreement: Agreement) -> None:
    if agreement.value is None:
        raise OptionError("min_agreement: the model has no output with a last axis of 2 or "
                          "more to take a top-1 agreement over")


def _node_macs(named: Path, feed: Mapping[str, np.ndarray]) -> Dict[str, int]:
    """Multiply-accumulates of each node of the float model at the feed's shapes."""
    import onnx_graphsurgeon as gs
    loaded = load_model(named, shapes={k: list(np.shape(v)) for k, v in feed.items()})
    return {n.name: node_macs(n) for n in gs.import_onnx(loaded.proto).nodes}


def _layer_macs(row: LayerQuality, macs: Mapping[str, int]) -> int:
    return sum(macs.get(n, 0) for n in row.op_nodes)


def _ranked(analysis: QuantAnalysis, kept: Sequence[str], macs: Mapping[str, int]
            ) -> List[LayerQuality]:
    """The int8 compute layers not kept, by the noise their isolated SNR says they add per
    multiply-accumulate they would take to fp16, most first."""
    rows = [r for r in analysis.rows if r.isolated_snr_db is not None
            and r.layer_name in KEEPABLE_LAYERS and r.dtype == "int8" and r.op_nodes
            and not set(r.op_nodes) <= set(kept)]
    return sorted(rows, key=lambda r: -10 ** (-r.isolated_snr_db / 10)
                  / max(_layer_macs(r, macs), 1))


def _round(row: LayerQuality, ranked: Optional[Ranked] = None) -> Round:
    if ranked is None:
        return Round(row.layer, row.layer_name, row.isolated_snr_db, list(row.op_nodes))
    return Round(row.layer, row.layer_name, row.isolated_snr_db, list(row.op_nodes),
                 macs=ranked.macs, output_snr_db=ranked.output_snr_db)


def _candidate(analysis: QuantAnalysis, kept: Sequence[str]) -> Optional[LayerQuality]:
    """The next layer to give back without a target: worst isolated SNR first, among those
    below the threshold."""
    return next((r for r in analysis.below_isolated if r.layer_name in KEEPABLE_LAYERS
                 and r.dtype == "int8" and r.op_nodes and not set(r.op_nodes) <= set(kept)),
                None)
