"""The report of a quantization analysis: one ``LayerQuality`` row per Mrvl layer, and the verdicts.

Judging, after collecting (``quant_analysis.py``):

- requires: rows in run order with the SNR and cosine ``analyze_quantization`` measured
  (accumulated and isolated; ``None`` where not measured);
- ensures: ``first_below`` (the first layer whose accumulated SNR is under the threshold),
  ``below_isolated`` (the layers adding error, worst first) and ``worst``; ``format_table`` (the
  CLI's table with the verdict), ``to_dict`` (JSON, which has no infinity: an exact layer's SNR
  is null with ``exact: true``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from mrvl_convert.verify.metrics import json_snr
from mrvl_convert.verify.report import aligned_lines

DEFAULT_THRESHOLD_DB = 20.0


@dataclass
class LayerQuality:
    """One Mrvl layer's figures; ``None`` where not measured (``note`` says why)."""

    stage: str
    layer: str
    layer_name: str
    dtype: str
    tensor: str
    op_nodes: List[str]
    snr_db: Optional[float] = None
    cosine: Optional[float] = None
    isolated_snr_db: Optional[float] = None
    isolated_cosine: Optional[float] = None
    note: str = ""


@dataclass
class QuantAnalysis:
    """The per-layer table, in run order, and the verdicts against ``threshold_db``."""

    rows: List[LayerQuality]
    samples: int
    threshold_db: float = DEFAULT_THRESHOLD_DB
    unmapped: List[str] = field(default_factory=list)
    range_events: List[str] = field(default_factory=list)  # fp16 layers' inf/NaN outputs
    # why ``samples`` is fewer than the caller was given (e.g. the calibration set's size)
    samples_note: str = ""

    @property
    def first_below(self) -> Optional[LayerQuality]:
        """The first layer, in run order, whose accumulated SNR is below the threshold."""
        return next((r for r in self.rows if _below(r.snr_db, self.threshold_db)), None)

    @property
    def below_isolated(self) -> List[LayerQuality]:
        """Layers whose isolated SNR is below the threshold (the error they add), worst first."""
        rows = [r for r in self.rows if _below(r.isolated_snr_db, self.threshold_db)]
        return sorted(rows, key=lambda r: r.isolated_snr_db)

    def worst(self, layers: Optional[frozenset] = None) -> Optional[LayerQuality]:
        """The layer with the lowest isolated SNR (of the ``layers`` kinds, if given)."""
        rows = [r for r in self.rows if r.isolated_snr_db is not None
                and (layers is None or r.layer_name in layers)]
        return min(rows, key=lambda r: r.isolated_snr_db, default=None)

    def row_for(self, op_node: str) -> Optional[LayerQuality]:
        """The row of the layer made from float-model node ``op_node``."""
        return next((r for r in self.rows if op_node in r.op_nodes), None)

    def to_dict(self) -> Dict[str, Any]:
        first = self.first_below
        return {"threshold_db": self.threshold_db, "samples": self.samples,
                "samples_note": self.samples_note,
                "first_below": None if first is None else first.layer,
                "below_isolated": [r.layer for r in self.below_isolated],
                "unmapped": list(self.unmapped), "range_events": list(self.range_events),
                # JSON has no infinity: an exact layer's SNR is written as null, "exact": true
                "rows": [_json_row(r) for r in self.rows]}

    def format_table(self) -> str:
        header = ("layer", "kind", "dtype", "tensor", "SNR dB", "cosine", "isol. SNR dB",
                  "isol. cosine", "")
        text = aligned_lines(header, [_cells(r, self.threshold_db) for r in self.rows], rule_last=False)
        text.append(self.verdict())
        return "\n".join(text)

    def verdict(self) -> str:
        """What the table says, in two sentences."""
        limit = f"{self.threshold_db:g} dB"
        first = self.first_below
        why = f" ({self.samples_note})" if self.samples_note else ""
        words = [f"{len(self.rows)} layers over {self.samples} sample(s){why}; " + (
            f"every layer's accumulated SNR is at least {limit}" if first is None else
            f"first layer below {limit} accumulated: {first.layer} ({first.layer_name}, "
            f"{first.tensor}, {first.snr_db:.1f} dB)")]
        below = self.below_isolated
        words.append(f"layers adding error below {limit} (isolated), worst first: " + (
            ", ".join(f"{r.layer} ({r.layer_name} {'/'.join(r.op_nodes) or r.tensor}, "
                      f"{r.isolated_snr_db:.1f} dB)" for r in below[:8]) if below else "none"))
        if self.unmapped:
            words.append(f"not mapped to the float model: {', '.join(self.unmapped[:8])}")
        words += [f"fp16 range: {event}" for event in self.range_events]
        return "\n".join(words)


def _below(value: Optional[float], threshold: float) -> bool:
    return value is not None and value < threshold


def _fmt(value: Optional[float], spec: str) -> str:
    if value is None:
        return "-"
    return "exact" if value == math.inf else format(value, spec)


def _cells(row: LayerQuality, threshold: float) -> Tuple[str, ...]:
    flag = "<" if _below(row.isolated_snr_db, threshold) else (
        "." if _below(row.snr_db, threshold) else "")
    return (row.layer, row.layer_name, row.dtype, row.tensor, _fmt(row.snr_db, ".1f"),
            _fmt(row.cosine, ".5f"), _fmt(row.isolated_snr_db, ".1f"),
            _fmt(row.isolated_cosine, ".5f"), (flag + "  " + row.note).strip())


def _json_row(row: LayerQuality) -> Dict[str, Any]:
    out = json_snr(asdict(row), ("snr_db", "isolated_snr_db"))
    for key in ("cosine", "isolated_cosine"):  # NaN: an inf/NaN output (range_events)
        if out[key] is not None and not math.isfinite(out[key]):
            out[key] = None
    return out
