"""The report of a comparison: one ``Row`` per tensor, and the ``Comparison`` of the run.

- requires: rows made by ``compare`` (figures from ``metrics.py``, verdicts against the
  tolerances), in run order;
- ensures: the verdict is the model outputs' rows only (boundary and layer rows are
  diagnostics), and never PASS over nothing: an output not compared fails it, named, and so
  does a comparison with no output; ``format_table`` (the CLI's table), ``summary_line`` (one
  line of a batch log) and ``to_dict`` (JSON) say the same thing.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from mrvl_convert.core.samples import SampleOrigin

if TYPE_CHECKING:  # quant_cost runs onnxruntime; the report only reads its figures
    from mrvl_convert.verify.quant_cost import QuantCost


# An artifact within this many times the floor's max abs error is fp16-sensitive, not wrong:
# the floor rounds each node's result once; the device also rounds inside some layers (a
# Winograd transform, a fused activation) and folds some nodes into one rounding, so a correct
# artifact lands near the floor, not on it.
FLOOR_MULTIPLE = 3.0


def judge(max_abs: Optional[float], floor: Optional[float],
          floor_over: Optional[str] = None) -> Optional[str]:
    """What a failing output's error says against its fp16 floor (``fp16_floor.py``): within
    ``FLOOR_MULTIPLE`` times it, the model is fp16-sensitive; far above, the converter is
    wrong. None when either is not known. ``floor_over``: the floor's own excess over the
    tolerance (``floor_excess``), when it has one."""
    if max_abs is None or floor is None:
        return None
    if not math.isfinite(floor):  # the model rounded to fp16 gives inf or NaN itself
        return ("the fp16 floor is not finite: rounding the model's own tensors to fp16 "
                "overflows, not a converter defect (--keep-fp32 keeps the nodes in fp32)")
    if max_abs <= FLOOR_MULTIPLE * floor and floor_over:
        # Rounding every tensor once already fails: keeping a few layers in fp32 passes only
        # when a few cause that, which the advice must not promise (slanet-plus: none does).
        return (f"within {FLOOR_MULTIPLE:g}x the fp16 floor: the model is fp16-sensitive, and "
                f"the floor itself is outside tolerance ({floor_over}): rounding the model's "
                "own tensors to fp16 once fails it (--keep-fp32 auto passes only if a few "
                "layers cause that, and says when none does; else the model needs fp32 or a "
                "wider --rtol)")
    if max_abs <= FLOOR_MULTIPLE * floor:
        return (f"within {FLOOR_MULTIPLE:g}x the fp16 floor: the model is fp16-sensitive "
                "(--keep-fp32 auto keeps its costliest layers in fp32)")
    times = "" if floor == 0 else f" ({max_abs / floor:.0f}x)"
    return (f"far above the fp16 floor{times}: a converter defect, not fp16 (please report "
            "it)")


def floor_excess(row: "Row") -> Optional[str]:
    """``"max_rel 0.0354 > 0.01"`` when the output's fp16 floor is itself outside the row's
    tolerance (its max_rel bound, above its absolute floor; in some one sample where
    ``floor_passes`` is known), else None."""
    tol = row.tolerance or {}
    bound, atol = tol.get("max_rel"), tol.get("atol") or 0.0
    rel, abs_err = row.floor_max_rel, row.floor_max_abs
    if bound is None or rel is None or abs_err is None or not math.isfinite(rel):
        return None
    if row.floor_passes:  # every sample within: max_rel and max_abs were different samples'
        return None
    return f"max_rel {rel:.3g} > {bound:.3g}" if rel > bound and abs_err > atol else None


def aligned_lines(header: Sequence[str], rows: Sequence[Sequence[str]], *,
                  rule_last: bool = True) -> List[str]:
    """``header`` and ``rows`` as left-aligned columns two spaces apart, a rule of dashes under
    the header (not under the last column when ``rule_last`` is False: an unlabelled note)."""
    lines = [tuple(header)] + [tuple(row) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    text.insert(1, "  ".join("-" * w for w in (widths if rule_last else widths[:-1])))
    return text


@dataclass
class Row:
    """The comparison of one tensor over all samples."""

    tensor: str
    kind: str  # "output" (the verdict) | "boundary" | "layer" (diagnostics)
    shape: List[int]
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    cosine: Optional[float] = None
    top1: Optional[float] = None
    tolerance: Optional[Dict[str, Any]] = None
    passed: bool = True
    note: str = ""
    near_ties: int = 0  # top-1 flips where fp32's margin was within the bound: not counted
    random_flips: int = 0  # top-1 flips beyond the bound on random samples: not judged
    # the fp16 floor (fp16_floor.py): the reference with every float tensor rounded to fp16
    floor_max_abs: Optional[float] = None
    floor_max_rel: Optional[float] = None
    # the floor within the row's tolerance in every sample, judged as the row is (None: not
    # known): max_rel alone may be a near-zero sample's, below the absolute floor (deepcut)
    floor_passes: Optional[bool] = None


@dataclass
class Comparison:
    rows: List[Row]
    samples: int
    range_events: List[str] = field(default_factory=list)
    # an int8 verify's second reference: the fp32 model (what quantization costs)
    fp32: Optional["QuantCost"] = None
    reference: str = ""  # the model the verdict is judged against (its path or graph name)
    origin: Optional[SampleOrigin] = None  # where the samples came from (None: not said)
    floor_note: str = ""  # why the fp16 floor was not measured ('' when it was, or not asked)
    # where a layer overflowed: the model's own float32 values beyond 65504 (fp16_overflow.py)
    overflow: str = ""
    overflow_nodes: List[str] = field(default_factory=list)  # the nodes writing those values
    # random samples' inputs drawn as 0/1 (reference.zero_one_note; '' when none was)
    feed_note: str = ""

    @property
    def samples_text(self) -> str:
        """e.g. "8 samples: 2 held out of calibration, 6 random", or "1 sample(s)"."""
        return self.origin.describe() if self.origin is not None else \
            f"{self.samples} sample(s)"

    @property
    def passed(self) -> bool:
        """Every output compared and within tolerance; no output compared is no PASS."""
        rows = self.judged_rows
        return bool(rows) and all(row.passed for row in rows)

    @property
    def not_compared(self) -> List[str]:
        """The outputs the verdict could not compare (the reference has no such tensor, or
        a device file lacks it): each fails it."""
        return [r.tensor for r in self.judged_rows if r.tolerance is None and not r.passed]

    def _unjudged(self) -> Optional[str]:
        """Why the verdict is FAIL without figures: outputs not compared, or none at all."""
        if not self.judged_rows:
            return "no output was compared"
        missing = self.not_compared
        return None if not missing else (
            f"output(s) not compared: {', '.join(missing[:5])} (not in the reference "
            f"{self.reference or 'model'}: is it the model the artifact was converted from?)")

    @property
    def far_above_floor(self) -> List[Row]:
        """Failing outputs whose error is over ``FLOOR_MULTIPLE`` times their fp16 floor: a
        converter defect, which the first layer over tolerance locates (``layers=True``)."""
        return [r for r in self.judged_rows if not r.passed and r.floor_max_abs is not None
                and r.max_abs is not None and r.max_abs > FLOOR_MULTIPLE * r.floor_max_abs]

    @property
    def judged_rows(self) -> List[Row]:
        """The rows the verdict is made of: the model's outputs."""
        return [row for row in self.rows if row.kind == "output"]

    @property
    def boundaries_over(self) -> List[Row]:
        """Boundary rows outside their tolerance (diagnostics), in run order."""
        return [row for row in self.rows if row.kind == "boundary" and not row.passed]

    @property
    def first_layer_over(self) -> Optional[Row]:
        """The first layer row, in run order, outside its tolerance (None if none is)."""
        return next((r for r in self.rows if r.kind == "layer" and not r.passed), None)

    def to_dict(self) -> Dict[str, Any]:
        first = self.first_layer_over
        return {"passed": self.passed, "samples": self.samples, "reference": self.reference,
                "origin": None if self.origin is None else self.origin.to_dict(),
                "range_events": list(self.range_events), "overflow": self.overflow,
                "feed_note": self.feed_note,
                "first_layer_over": None if first is None else first.tensor,
                "rows": [asdict(r) for r in self.rows],
                "fp32": None if self.fp32 is None else self.fp32.to_dict()}

    def summary_line(self) -> str:
        """One line for a batch log: the verdict and the worst figures over all tensors."""
        verdict = "PASS" if self.passed else "FAIL"
        rows = self.judged_rows
        worst = max(rows, key=lambda r: r.max_rel or 0.0, default=None)
        parts = [f"{verdict} over {self.samples_text}; {len(rows)} output(s)"]
        parts += [self.feed_note] if self.feed_note else []
        if worst is not None and worst.max_rel is not None:
            parts.append(f"worst max_abs {worst.max_abs:.3g}, max_rel {worst.max_rel:.3g} "
                         f"({worst.tensor})")
        parts += self._floor_parts()
        unjudged = self._unjudged()
        if unjudged:
            parts.append(unjudged)
        failing = [r.tensor for r in rows if not r.passed and r.tensor not in self.not_compared]
        if failing:
            parts.append(f"outside tolerance: {', '.join(failing[:5])}")
        cosines = [r.cosine for r in rows if r.cosine is not None]
        if cosines:
            parts.append(f"min cosine {min(cosines):.6f}")
        top1 = [r.top1 for r in rows if r.top1 is not None]
        if top1:
            parts.append(f"top-1 agreement {min(top1):.4f}" + _ties_text(rows))
        over = self.boundaries_over
        if over:
            parts.append(f"{len(over)} stage-boundary tensor(s) over tolerance, first "
                         f"{over[0].tensor} (diagnostic)")
        parts += [self.overflow] if self.overflow else []
        parts += [f"fp16 range: {e}" for e in self.range_events]
        if self.fp32 is not None:
            parts.append(self.fp32.summary())
        return "; ".join(parts)

    def _floor_parts(self) -> List[str]:
        """The fp16 floor per output, and what each failing output's error says against it."""
        rows = [r for r in self.judged_rows if r.floor_max_rel is not None]
        if self.floor_note:
            return [f"fp16 floor {self.floor_note}"]
        if not rows:
            return []
        ranked = sorted(rows, key=lambda r: -(r.floor_max_rel or 0.0))
        parts = ["fp16 floor (every float tensor rounded to fp16) max_rel " + ", ".join(
            f"{_floor_fmt(r.floor_max_rel)} ({r.tensor})" for r in ranked[:3]) +
            (f" and {len(ranked) - 3} more" if len(ranked) > 3 else "")]
        for row in self.judged_rows:
            said = None if row.passed else judge(row.max_abs, row.floor_max_abs,
                                                 floor_excess(row))
            if said and self.overflow:  # the model's own values leave fp16's range
                said = "fails where fp16 overflows in the model itself, not a converter defect"
            if said:
                parts.append(f"{row.tensor} {said}" + (
                    self._first_over() if row in self.far_above_floor else ""))
        return parts

    def _first_over(self) -> str:
        first = self.first_layer_over
        if first is not None:
            return f"; the first layer over tolerance is {first.tensor} ({first.note})"
        if any(r.kind == "layer" for r in self.rows):
            return "; no layer row is over tolerance"
        return "; mrvl-verify --layers names the first layer over tolerance"

    def format_table(self) -> str:
        header = ("tensor", "kind", "shape", "max_abs", "max_rel", "cosine", "top1",
                  "tol atol/rel/cos/top1", "ok")
        text = aligned_lines(header, [_table_cells(row) for row in self.rows])
        text += [self.overflow] if self.overflow else []
        for event in self.range_events:
            text.append(f"fp16 range: {event}")
        verdict = "PASS" if self.passed else "FAIL"
        rows = self.judged_rows
        text.append(f"{verdict}: {sum(r.passed for r in rows)}/{len(rows)} outputs "
                    f"within tolerance over {self.samples_text}")
        text += [self.feed_note] if self.feed_note else []
        unjudged = self._unjudged()
        if unjudged:
            text.append(f"FAIL: {unjudged}")
        if self.boundaries_over:
            text.append("boundary rows are diagnostics, not part of the verdict; the first "
                        f"boundary tensor outside tolerance is {self.boundaries_over[0].tensor}")
        text += self._floor_parts()
        if any(row.kind == "layer" for row in self.rows):
            text.append(self._layer_verdict())
        if self.fp32 is not None:
            text += self.fp32.format_lines()
        return "\n".join(text)

    def _layer_verdict(self) -> str:
        """What the layer rows say, with how many were compared and why the others were not:
        "every compared layer is within tolerance" only when some layer was compared."""
        layers = [r for r in self.rows if r.kind == "layer"]
        compared = [r for r in layers if r.tolerance is not None]
        first = self.first_layer_over
        counts = f"{len(compared)} of {len(layers)} layer(s) compared"
        if len(compared) < len(layers):
            reasons = _skip_reasons([r for r in layers if r.tolerance is None])
            counts += f", {len(layers) - len(compared)} skipped ({reasons})"
        if not compared:
            verdict = "no layer was compared"
        elif first is None:
            verdict = "every compared layer is within tolerance"
        else:
            verdict = f"the first layer outside tolerance is {first.tensor} ({first.note})"
        return f"layer rows are diagnostics, not part of the verdict; {counts}; {verdict}"


def _floor_fmt(value: Optional[float]) -> str:
    """A floor figure; an infinite one is the rounded model leaving fp16's range."""
    if value is not None and not math.isfinite(value):
        return "inf (overflows fp16)"
    return _fmt(value)


def _ties_text(rows: Sequence[Row]) -> str:
    """" (1 flip on a near tie, not counted)" when some output's flips were near ties; the
    flips beyond the bound on random samples, which never decide a FAIL, are said too."""
    ties, loose = sum(r.near_ties for r in rows), sum(r.random_flips for r in rows)
    said = ([f"{ties} flip{'s' if ties > 1 else ''} on a near tie, not counted"] if ties else [])
    said += [f"{loose} flip{'s' if loose > 1 else ''} on random inputs, not judged"] \
        if loose else []
    return f" ({'; '.join(said)})" if said else ""


def _skip_reasons(rows: List[Row], most: int = 2) -> str:
    """The distinct reasons layer rows were not compared, most frequent first, with counts."""
    counts: Dict[str, int] = {}
    for row in rows:
        why = row.note.split("not compared: ", 1)[-1]
        if why.startswith("source node "):  # an int8 layer's QDQ node, if a float model is given
            why = ("a QuantizeLinear/DequantizeLinear source node the model does not have (an "
                   "int8 layer: --quant-analysis compares it with a float model)"
                   if "QuantizeLinear'" in why else "a source node the model does not have")
        counts[why] = counts.get(why, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    text = "; ".join(f"{n}: {why}" for why, n in ranked[:most])
    return text + (f"; {len(ranked) - most} other reason(s)" if len(ranked) > most else "")


def _fmt(value: Optional[float], spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def _table_cells(row: Row) -> tuple:
    tol = row.tolerance
    tol_text = "-" if tol is None else \
        f"{tol['atol']:g}/{tol['max_rel']:g}/{tol['min_cosine']:g}/{tol['min_top1']:g}"
    if row.kind == "layer":  # diagnostics: "over" tolerance, never a FAIL of the run
        ok = ("ok" if row.passed else "over") if row.tolerance else "skip"
    else:
        ok = ("ok" if row.passed else "FAIL") if row.tolerance or not row.passed else "skip"
    # a dim only the run decides (a decoded sequence after a Loop: shape_failures.py) is "?"
    shape = "x".join("?" if d is None else str(d) for d in row.shape)
    return (row.tensor, row.kind, shape, _fmt(row.max_abs),
            _fmt(row.max_rel), _fmt(row.cosine, ".6f"), _fmt(row.top1, ".4f"), tol_text,
            ok + (f"  {row.note}" if row.note else ""))
