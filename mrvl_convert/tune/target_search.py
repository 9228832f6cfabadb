"""The held-out search of ``--keep-fp16 auto --min-agreement`` (``tune/keep_fp16.py``'s module
docstring): recipes first (``tune/layer_recipes.py``), then the layers ranked by measured gain
per multiply-accumulate kept in fp16, a prefix of that ranking by bisection
(``tune/prefix_search.py``), judged on held-out samples.

Every trial quantizes the named float model with the user's recipe plus the recipes chosen so
far, converts and measures against the fp32 outputs computed once per sample
(``tune/agreement.py``); the calibration ranges are computed once (one float run per choice
sample) and reused by every trial that does not change the float model's activations. The
many trials that only rank (a layer's sensitivity, a recipe's gain: output SNR, a continuous
figure) are measured on the first ``PROBE_SAMPLES`` choice samples; the prefixes the bisection
tries, which decide, on all of them.

- requires: a ``KeepFp16Result`` with a target, the named float model, its calibration samples;
- ensures: the result's kept nodes, recipes and figures are those of the model written to
  ``result.model``, calibrated on the choice rows only.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.convert import convert_with
from mrvl_convert.core.macs import node_macs
from mrvl_convert.core.samples import SampleSplit, remedy_split
from mrvl_convert.errors import OptionError
from mrvl_convert.frontend.load import load_model
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.keep import ANALYSIS_SAMPLES, analysis_feeds
from mrvl_convert.tune import layer_recipes
from mrvl_convert.tune.agreement import Agreement, measure, reference_outputs, stage_counts
from mrvl_convert.tune.keep_result import KeepFp16Result, Round
from mrvl_convert.tune.layer_recipes import Recipes
from mrvl_convert.tune.prefix_search import Point, Ranked, bisect, rank, share
from mrvl_convert.verify.quant_analysis import (KEEPABLE_LAYERS, QuantAnalysis,
                                                analyze_quantization)
from mrvl_convert.verify.quant_report import LayerQuality

# Choice samples the sensitivity and recipe trials (many, ranking only) are measured on; the
# prefixes the bisection tries (few, deciding) are measured on every choice sample.
PROBE_SAMPLES = 32


@dataclass
class Trial:
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

    def run(self, kept: Sequence[str], judge: bool = True,
            recipes: Recipes = Recipes()) -> tuple:
        """(choice Agreement, held-out Agreement or None, stages, artifact) of ``kept`` in
        float, quantized with ``recipes`` on top of the user's; ``judge=False``: the choice
        samples only, the first ``PROBE_SAMPLES`` of them (a sensitivity or recipe trial)."""
        self.quantize(exclude=list(kept), **recipes.kwargs(self.tmp))
        artifact = self.tmp / f"trial{self.count}"
        self.count += 1
        convert_with(self.out, artifact, self.options)
        if not judge:
            return self.probe(artifact), None, {}, artifact
        chosen = measure(artifact, self.choose, self.references[0])
        held = measure(artifact, self.judge, self.references[1])
        return chosen, held, stage_counts(artifact), artifact

    def probe(self, artifact: Path) -> Agreement:
        """The artifact on the first ``PROBE_SAMPLES`` choice feeds: what sensitivity and
        recipe trials are measured on, all against the same feeds."""
        return measure(artifact, self.choose[:PROBE_SAMPLES], self.references[0])


def search(result: KeepFp16Result, named: Path, calibration: Mapping[str, np.ndarray],
           threshold: float, max_rounds: int, options: ConvertOptions, tmp: Path,
           quantize_with: Callable[..., Path], user: Mapping[str, bool],
           recipes_first: bool = True) -> None:
    """The held-out search (module docstring); ``user``: the recipe switches the user set
    (``equalize``, ``bias_correction``), which every trial keeps; ``recipes_first``: try the
    recipes before any layer is kept in fp16."""
    given, rows = _split(calibration, named)
    choose_cal, judge_cal = rows.take_stacked(given)
    choose = analysis_feeds(named, choose_cal, count=_count(choose_cal))
    judge = analysis_feeds(named, judge_cal, count=_count(judge_cal))
    # Every trial, and so the model written, is calibrated on exactly the choice rows: the
    # artifact made with those rows (Quantization.rows) is the model the held-out figure is of.
    result.calibration_rows, result.held_out_rows = list(rows.choose), list(rows.judge)
    trial = Trial(named, result.model, functools.partial(  # one calibration run, its ranges kept
        quantize_with, named, result.model, given, rows=rows.choose, ranges=tmp / "ranges.json"),
                   options, tmp, choose, judge,
                   (reference_outputs(named, choose), reference_outputs(named, judge)))
    macs = _node_macs(named, choose[0])
    total = sum(macs.values())
    base, held, stages, artifact = trial.run(result.kept)
    probe = trial.probe(artifact)
    _need_top1(base)
    result.agreement_before, result.held_out_before = base.value, held.value
    result.samples, result.held_out_samples = _samples(choose), _samples(judge)
    result.stages_before = stages
    result.int8_mac_share_before = share(result.kept, macs, total)
    result.analysis = analyze_quantization(named, artifact, choose[:ANALYSIS_SAMPLES],
                                           threshold_db=threshold)
    start = _point(0, result.kept, base, held, macs, total, result.min_agreement)
    stages_of = {0: stages}
    if not start.reaches and max_rounds > 0 and recipes_first:
        base, held, stages_of[0], probe = _recipes(result, trial, named, choose,
                                                   (base, held, stages, probe), user)
        start = _point(0, result.kept, base, held, macs, total, result.min_agreement)
        start.recipes = sum(c.kept for c in result.recipe_trials)
    recipes = result.recipes
    if start.reaches or max_rounds == 0:
        ranked: List[Ranked] = []
    else:
        ranked = rank([Ranked(r, _layer_macs(r, macs))
                       for r in _ranked(result.analysis, result.kept, macs)], probe,
                      lambda row: trial.run(result.kept + row.op_nodes, judge=False,
                                            recipes=recipes)[0])
    result.ranking = ranked

    def prefix_nodes(k: int) -> List[str]:
        return result.kept + [n for r in ranked[:k] for n in r.row.op_nodes
                              if n not in result.kept]

    def try_prefix(k: int) -> Point:
        got, held_k, stages_of[k], _ = trial.run(prefix_nodes(k), recipes=recipes)
        return _point(k, prefix_nodes(k), got, held_k, macs, total, result.min_agreement)

    chosen, result.curve = bisect(len(ranked), max_rounds, try_prefix, start)
    if start.recipes:  # the recipes' point: prefix 0, every layer int8
        result.curve.insert(0, start)
    result.rounds = [_round(r.row, r) for r in ranked[:chosen.prefix]]
    result.kept = prefix_nodes(chosen.prefix)
    result.stages_after = stages_of[chosen.prefix]
    if result.curve and result.curve[-1] is not chosen:
        # the model written is the chosen one
        trial.quantize(exclude=result.kept, **recipes.kwargs(trial.tmp))
    result.agreement, result.held_out = chosen.agreement, chosen.held_out
    result.snr_db, result.int8_mac_share = chosen.snr_db, chosen.int8_mac_share


def _recipes(result: KeepFp16Result, trial: Trial, named: Path, choose: List[Dict],
             measured: tuple, user: Mapping[str, bool]) -> tuple:
    """The recipes phase (``tune/layer_recipes.py``): sets ``result.recipes`` and
    ``result.recipe_trials``; returns the choice and held-out Agreements and the stages of
    the all-int8 model with them, and its probe figures (``measured``: those of the user's
    recipe alone)."""
    nodes = _node_names(named)

    def alone(row: LayerQuality, recipes: Recipes) -> Agreement:
        others = [n for n in nodes if n not in row.op_nodes]
        return trial.run(others, judge=False, recipes=recipes)[0]
    rows = _ranked(result.analysis, result.kept, {})
    # an equalized model's tensors are not the float model's: no range is chosen on them
    ranges = {} if user.get("equalize") else layer_recipes.mse_ranges(
        named, choose, [r.tensor for r in rows[:layer_recipes.RECIPE_LAYERS]])
    convs = [n for n, op in nodes.items() if op == "Conv"]
    chosen, result.recipe_trials = layer_recipes.per_layer(
        rows, Recipes(), alone, ranges, bool(user.get("bias_correction")), convs)
    result.recipes = chosen
    if chosen == Recipes():
        return measured
    got, held, stages, artifact = trial.run(result.kept, recipes=chosen)
    return got, held, stages, trial.probe(artifact)


def _node_names(named: Path) -> Dict[str, str]:
    """The named float model's nodes: name -> op type, in graph order."""
    import onnx
    return {n.name: n.op_type for n in onnx.load(str(named)).graph.node}


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



__all__: List[str] = ["Trial", "search"]
