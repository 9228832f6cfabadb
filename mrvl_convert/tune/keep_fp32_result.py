"""What ``--keep-fp32`` (``tune/keep_fp32.py``) found and how ``auto`` judges a round.

A round of ``auto`` keeps one more layer in fp32 on the CPU, which costs Mrvl<->CPU cuts and
moves MACs off the accelerator. It is kept only when it buys something, measured on the
samples that choose (never on the held-out ones, which judge the choice):

- the criterion, ``error``: the worst model output's max_rel over that output's max_rel
  tolerance (inf when an output is not finite or not compared); verify's samples and
  conversions are deterministic, so two rounds' figures differ only by what the round kept;
- a round is kept when verify passes with it, or when it lowers ``error`` below
  ``1 - MARGIN`` times the error of the state before it (the last round kept, the norms
  scaled, or no node kept); else it is undone: its nodes go back to fp16, its figures and
  what it would have cost are recorded (``undone``), and the search goes on with the next
  candidate;
- the round keeping the model's own fp16 overflow (``verify/fp16_overflow.py``) is never
  undone: fp16 cannot hold those values, so no passing conversion computes them in fp16, and
  the outputs may stay inf until a later round keeps a reader (magika's head);
- the search stops after ``PATIENCE`` rounds in a row undone (the candidates come worst
  first: the later ones cost the outputs less still), as it stops at ``max_rounds``.

So the artifact keeps only layers that each lowered the error by more than ``MARGIN`` of it
(slanet-plus: 3 Conv+BN layers moved 8.6% of its MACs to the CPU for max_rel 0.0433 ->
0.0424, 2%, with a floor outside tolerance that no keeping passes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from mrvl_convert.verify.fp16_analysis import Fp16Analysis
from mrvl_convert.verify.report import Comparison

# A round must lower the worst output's error by more than this share of it: less does not
# pay for a layer moved to the CPU (a cut each side, its MACs off the accelerator).
MARGIN = 0.05
# Rounds undone in a row after which the search stops (the candidates come worst first).
PATIENCE = 2


@dataclass
class KeepFp32Result:
    """The nodes kept in fp32, the verify figures before (none kept) and after, the ``auto``
    rounds, the fp16 analysis they were chosen by, and report.json's ``keep_fp32`` section."""

    model: str
    kept: List[str]
    before: Dict[str, Any]
    after: Dict[str, Any]
    rounds: List[Dict[str, Any]] = field(default_factory=list)
    analysis: Optional[Fp16Analysis] = None
    cost: Optional[Dict[str, Any]] = None
    # ``auto``: how many samples chose (``before``/``after`` are theirs), and the verdicts
    # before and after on the samples held out of the choice ({"samples", "before", "after"})
    chosen_on: Optional[int] = None
    held_out: Optional[Dict[str, Any]] = None
    # ``auto``: the nodes whose float32 values leave fp16's range (verify/fp16_overflow.py)
    overflow: List[str] = field(default_factory=list)
    # ``auto``: the norms scaled so their squares stay inside fp16 (ReduceMean -> k), and the
    # artifact converted with them
    norm_scales: Dict[str, int] = field(default_factory=dict)
    scaled: Optional[Path] = None
    # ``auto`` that ends in FAIL: why keeping layers could not pass (``unreached``)
    unreached: str = ""
    # ``auto``: why the search stopped before its candidates or rounds ran out ('' if not)
    stopped: str = ""
    # ``auto``: the criterion's value (``error``) of ``after``, the state a round must better
    error: float = math.inf

    @property
    def measured(self) -> Dict[str, Any]:
        figures = {"before": self.before, "after": self.after, "rounds": self.rounds}
        if self.chosen_on is not None:
            figures.update(chosen_on=self.chosen_on, held_out=self.held_out)
        if self.stopped:
            figures["stopped"] = self.stopped
        return figures

    @property
    def undone(self) -> List[Dict[str, Any]]:
        """The rounds tried and undone (they did not lower the error by ``MARGIN``)."""
        return [r for r in self.rounds if "undone" in r]

    def line(self) -> str:
        """One line: what was kept, what it cost, and the error before and after (with
        ``auto``: on the samples that chose, then on those held out of the choice), then
        what was tried and undone."""
        verdicts = (f"verify {_verdict(self.before)} -> {_verdict(self.after)}"
                    if self.kept or self.norm_scales else f"verify {_verdict(self.before)}")
        if self.chosen_on is not None:
            verdicts = f"chosen on {_count(self.chosen_on)}: {verdicts}; " + (
                f"held out {_count(self.held_out['samples'])}: "
                f"{_verdict(self.held_out['before'])} -> {_verdict(self.held_out['after'])}"
                if self.held_out else "no sample held out (one sample): judged in sample")
        scaled = (f"{len(self.norm_scales)} norm(s) scaled by powers of two so their squares "
                  f"stay inside fp16 (exact; frontend/norm_range.py); " if self.norm_scales
                  else "")
        verdicts += self._undone_text()
        verdicts += f"; {self.unreached}" if self.unreached else ""
        if not self.kept:
            return f"keep-fp32 {self.model}: {scaled}nothing kept in fp32; {verdicts}"
        cost = self.cost or {}
        return (f"keep-fp32 {self.model}: {scaled}kept in fp32 on the CPU: "
                f"{', '.join(self.kept)}; "
                f"cost {cost.get('extra_mrvl_subgraphs', 0):+d} Mrvl / "
                f"{cost.get('extra_cpu_subgraphs', 0):+d} CPU subgraph(s), "
                f"{cost.get('extra_transitions', 0):+d} cut(s), "
                f"{100 * cost.get('mac_share_moved', 0.0):.1f}% of the MACs moved to the CPU; "
                f"{verdicts}")

    def _undone_text(self) -> str:
        undone = self.undone
        if not undone:
            return ""
        text = "; tried and undone (each must lower the worst output's error by more than " \
               f"{100 * MARGIN:g}%): " + ", ".join(_round_text(r) for r in undone)
        return text + (f"; {self.stopped}" if self.stopped else "")


def _round_text(entry: Dict[str, Any]) -> str:
    cost = entry.get("cost") or {}
    return (f"{'/'.join(entry['nodes'])} ({entry['undone']}, would move "
            f"{100 * cost.get('mac_share_moved', 0.0):.1f}% of the MACs)")


def worst_error(check: Comparison) -> float:
    """The criterion (module docstring): the worst output's max_rel over its tolerance's
    max_rel (its max_rel alone where that bound is 0); inf when not finite or not compared."""
    ratios = [_ratio(r.max_rel, (r.tolerance or {}).get("max_rel"))
              for r in check.judged_rows]
    return max(ratios, default=math.inf)


def _ratio(max_rel: Optional[float], bound: Optional[float]) -> float:
    if max_rel is None or not math.isfinite(max_rel):
        return math.inf
    return max_rel / bound if bound else max_rel


def helps(before: float, after: float) -> bool:
    """Whether a round that did not pass lowered ``error`` by more than ``MARGIN`` of it
    (inf -> finite does; inf -> inf does not)."""
    return after < (1.0 - MARGIN) * before if math.isfinite(before) else math.isfinite(after)


def undone_reason(before: float, after: float) -> str:
    """What an undone round measured, e.g. "error 4.33 -> 4.24 x tolerance"."""
    return f"error {_times(before)} -> {_times(after)} x tolerance"


def _times(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else "inf"


def verify_figures(check: Comparison) -> Dict[str, Any]:
    """The verify verdict and its worst output figures, for report.json and the line."""
    rows = check.judged_rows
    worst = max(rows, key=lambda r: r.max_rel or 0.0, default=None)
    cosines = [r.cosine for r in rows if r.cosine is not None]
    return {"passed": check.passed,
            "max_abs": _finite(None if worst is None else worst.max_abs),
            "max_rel": _finite(None if worst is None else worst.max_rel),
            "min_cosine": _finite(min(cosines) if cosines else None),
            "line": check.summary_line()}


def _finite(value: Optional[float]) -> Optional[float]:
    """JSON has no inf or NaN: such a figure is null (the line still says it)."""
    return value if value is not None and math.isfinite(value) else None


def _count(samples: int) -> str:
    return f"{samples} sample" + ("" if samples == 1 else "s")


def _verdict(figures: Dict[str, Any]) -> str:
    rel = figures.get("max_rel")
    return ("PASS" if figures["passed"] else "FAIL") + (
        f" (max_rel {rel:.3g})" if rel is not None else "")
