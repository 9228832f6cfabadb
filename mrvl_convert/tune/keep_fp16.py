"""Mixed precision: int8 with the layers that quantize worst kept in fp16 (``--keep-fp16``).

The named float-model nodes (or, with ``auto``, the op nodes of the layers whose isolated SNR
is below the threshold, worst first, one Conv2D or FC layer a round for a bounded number of
rounds) are left out of quantization (``quantize_static``'s ``nodes_to_exclude``). The QDQ model then has a
float op between a DequantizeLinear and a QuantizeLinear: the converter makes it an fp16 Mrvl
layer with ``quant`` layers at the region boundary (int8 -> float32 in front, float32 -> int8
after), in the same accelerator stage. The float rules of Conv, Gemm and MatMul take a
dequantized input as they take any float32 one; the elementwise float rules refuse to sit
inside an int8 region (``float_region``), which does not arise here since an excluded node
has no QDQ pair around its own output.

With a target top-1 agreement (``min_agreement``, ``--min-agreement``) ``auto`` goes on past the
threshold: each round tries the worst int8 compute layer by isolated SNR, whatever its SNR, and
keeps it in float if the artifact's top-1 agreement with the fp32 model (``tune/agreement.py``)
does not fall, until the agreement reaches the target, no candidate is left or the rounds run
out (``DEFAULT_TARGET_ROUNDS``); not reaching it is an outcome the result states (``reached``),
not an error.

The float model's nodes are named first (``load.name_nodes``), as the converter names them, so
that the names ``--keep-fp16`` takes, the names the report gives and the names
``quantize_static`` matches are the same ones.
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
from mrvl_convert.quantize.keep import AUTO, analysis_feeds, named_copy
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.tune.agreement import describe, stage_counts, top1_agreement
from mrvl_convert.verify.quant_analysis import (DEFAULT_THRESHOLD_DB, KEEPABLE_LAYERS,
                                                QuantAnalysis, analyze_quantization)
from mrvl_convert.verify.quant_report import LayerQuality

DEFAULT_ROUNDS = 3
DEFAULT_TARGET_ROUNDS = 8  # with min_agreement: tries, each a quantize, convert and measure
PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class Round:
    """One ``auto`` round: the worst layer found and the float-model nodes it gave back."""

    layer: str
    layer_name: str
    isolated_snr_db: float
    nodes: List[str]
    agreement: Optional[float] = None  # with a target: the artifact's with this layer tried
    accepted: bool = True  # with a target: False if the agreement fell, the layer not kept


@dataclass
class KeepFp16Result:
    """The QDQ model written, the float-model nodes left in float, the ``auto`` rounds and
    the analysis of the last conversion (``auto`` only)."""

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

    @property
    def reached(self) -> bool:
        """Whether the final model's agreement reaches ``min_agreement`` (False without one)."""
        return (self.min_agreement is not None and self.agreement is not None
                and self.agreement >= self.min_agreement)

    def to_dict(self) -> Dict[str, object]:
        """What the target cost, for the manifest's ``quantization.keep_fp16_auto``."""
        return {"min_agreement": self.min_agreement, "agreement": self.agreement,
                "agreement_before": self.agreement_before, "reached": self.reached,
                "layers": [r.layer for r in self.rounds if r.accepted],
                "nodes": [n for r in self.rounds if r.accepted for n in r.nodes],
                "rejected": [r.layer for r in self.rounds if not r.accepted],
                "rounds": len(self.rounds),
                "agreement_per_round": [r.agreement for r in self.rounds],
                "samples": self.samples, "stages_before": dict(self.stages_before),
                "stages_after": dict(self.stages_after)}

    def summary(self) -> str:
        """One line: the target, the agreement reached, the layers and stages it cost."""
        if self.min_agreement is None:
            return ""
        before = "-" if self.agreement_before is None else f"{self.agreement_before:.4f}"
        added = [r for r in self.rounds if r.accepted]
        nodes = ", ".join(n for r in added for n in r.nodes) or "none"
        return (f"{describe(self.agreement, self.min_agreement, self.reached)} (int8 alone "
                f"{before}, {self.samples} sample(s)); {len(added)} layer(s) added in fp16 "
                f"({nodes}), {len(self.rounds) - len(added)} tried and dropped (agreement "
                f"fell); stages {_stages(self.stages_before)} -> {_stages(self.stages_after)}")


def _stages(counts: Mapping[str, int]) -> str:
    return f"{counts.get('mrvl', 0)} Mrvl / {counts.get('cpu', 0)} CPU"


def quantize_keep_fp16(model: PathLike, out: PathLike, calibration: Mapping[str, np.ndarray],
                       keep_fp16: Union[str, Sequence[str]], *, inputs: Optional[Sequence[Dict]] = None,
                       threshold_db: Optional[float] = None, max_rounds: Optional[int] = None,
                       options: Optional[ConvertOptions] = None, method: str = "minmax",
                       min_agreement: Optional[float] = None, equalize: bool = False,
                       bias_correction: bool = False) -> KeepFp16Result:
    """``model`` quantized to ``out`` as ``quantize_int8`` does, but the nodes ``keep_fp16``
    names left in float, and with ``"auto"`` among them, the worst layers too (module
    docstring). ``inputs``: the feeds the ``auto`` analysis runs (default: calibration
    samples); ``options``: the options of its conversions (of a QDQ model: their
    ``quantize`` is not used); ``method``: the calibration method
    (``quantize.CALIBRATION_METHODS``); ``min_agreement``: the top-1 agreement with the fp32
    model ``auto`` keeps layers until (module docstring; ``max_rounds`` then defaults to
    ``DEFAULT_TARGET_ROUNDS``); ``equalize``, ``bias_correction``: as ``quantize_int8``."""
    if isinstance(keep_fp16, str):
        keep_fp16 = [keep_fp16]  # one name, not its letters
    _check_target(min_agreement, AUTO in keep_fp16)
    if max_rounds is None:
        max_rounds = DEFAULT_ROUNDS if min_agreement is None else DEFAULT_TARGET_ROUNDS
    if max_rounds < 0:
        raise OptionError(f"max_rounds must be >= 0, got {max_rounds}")
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="mrvl_keep_fp16_") as tmp:
        named = Path(tmp) / Path(model).name
        auto = AUTO in keep_fp16
        kept = [n for n in keep_fp16 if n != AUTO]
        named_copy(model, named, kept)
        quantize = functools.partial(quantize_int8, named, out, calibration, method=method,
                                     equalize=equalize, bias_correction=bias_correction)
        quantize(exclude=kept)
        result = KeepFp16Result(out, kept, min_agreement=min_agreement)
        if auto:
            threshold = DEFAULT_THRESHOLD_DB if threshold_db is None else threshold_db
            feeds = list(inputs) if inputs is not None else analysis_feeds(named, calibration)
            _auto(result, named, quantize, feeds, threshold, max_rounds,
                  replace(options or ConvertOptions(), quantize=None), Path(tmp))
    return result


def _check_target(min_agreement: Optional[float], auto: bool) -> None:
    if min_agreement is None:
        return
    if not auto:
        raise OptionError("min_agreement (--min-agreement) is only used with keep_fp16 'auto'")
    if not 0.0 < min_agreement <= 1.0:
        raise OptionError(f"min_agreement must be in (0, 1], got {min_agreement}")


def _auto(result: KeepFp16Result, named: Path, quantize: Callable[..., Path],
          feeds: List[Dict], threshold: float, max_rounds: int, options: ConvertOptions,
          tmp: Path) -> None:
    """Convert, analyse, give the worst compute layer below the threshold back to float,
    quantize again; at most ``max_rounds`` times. The last analysis is the final model's.
    With a target: ``_auto_target``."""
    if result.min_agreement is not None:
        _auto_target(result, named, quantize, feeds, threshold, max_rounds, options, tmp)
        return
    for k in range(max_rounds + 1):
        artifact = tmp / f"round{k}"
        convert_with(result.model, artifact, options)
        result.analysis = analyze_quantization(named, artifact, feeds, threshold_db=threshold)
        worst = _candidate(result, set()) if k < max_rounds else None
        if worst is None:
            break
        result.rounds.append(_round(worst))
        result.kept += [n for n in worst.op_nodes if n not in result.kept]
        quantize(exclude=result.kept)


def _auto_target(result: KeepFp16Result, named: Path, quantize: Callable[..., Path],
                 feeds: List[Dict], threshold: float, max_rounds: int,
                 options: ConvertOptions, tmp: Path) -> None:
    """Each round tries the next layer (worst isolated SNR first in the analysis of the model
    kept so far) and keeps it only if the agreement does not fall: a layer's own SNR does not
    say how the argmax fares, and with it in float its neighbours' scales change. Ends at the
    target, with no candidate left or after ``max_rounds`` tries; the model written is the
    best one (its kept nodes, agreement and stages the result's)."""
    artifact = tmp / "round0"
    convert_with(result.model, artifact, options)
    result.analysis = analyze_quantization(named, artifact, feeds, threshold_db=threshold)
    result.agreement_before = result.agreement = _agreement(named, artifact, feeds, result)
    result.stages_before = result.stages_after = stage_counts(artifact)
    tried: set = set()
    for k in range(1, max_rounds + 1):
        worst = None if result.reached else _candidate(result, tried)
        if worst is None:
            break
        tried.add(tuple(worst.op_nodes))
        trial = result.kept + [n for n in worst.op_nodes if n not in result.kept]
        quantize(exclude=trial)
        artifact = tmp / f"round{k}"
        convert_with(result.model, artifact, options)
        result.rounds.append(_round(worst, _agreement(named, artifact, feeds, result)))
        if result.rounds[-1].agreement >= result.agreement:
            result.kept, result.agreement = trial, result.rounds[-1].agreement
            result.stages_after = stage_counts(artifact)
            result.analysis = analyze_quantization(named, artifact, feeds,
                                                   threshold_db=threshold)
        else:
            result.rounds[-1].accepted = False
    if result.rounds and not result.rounds[-1].accepted:
        quantize(exclude=result.kept)  # the model written is the best one's


def _round(row: LayerQuality, agreement: Optional[float] = None) -> Round:
    return Round(row.layer, row.layer_name, row.isolated_snr_db, list(row.op_nodes), agreement)


def _agreement(named: Path, artifact: Path, feeds: List[Dict], result: KeepFp16Result
               ) -> float:
    """The artifact's top-1 agreement with the float model (an OptionError if it has none)."""
    agreement = top1_agreement(named, artifact, feeds)
    if agreement.value is None:
        raise OptionError("min_agreement: the model has no output with a last axis of 2 or "
                          "more to take a top-1 agreement over")
    result.samples = agreement.samples
    return agreement.value


def _candidate(result: KeepFp16Result, tried: set) -> Optional[LayerQuality]:
    """The next layer to give back: worst isolated SNR first, among those below the threshold
    (without a target) or all int8 compute layers neither kept nor tried (with one)."""
    analysis = result.analysis
    rows = analysis.below_isolated if result.min_agreement is None else sorted(
        (r for r in analysis.rows if r.isolated_snr_db is not None),
        key=lambda r: r.isolated_snr_db)
    return next((r for r in rows if r.layer_name in KEEPABLE_LAYERS and r.dtype == "int8"
                 and r.op_nodes and not set(r.op_nodes) <= set(result.kept)
                 and tuple(r.op_nodes) not in tried), None)
