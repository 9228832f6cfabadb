"""The ``--keep-fp16 auto --min-agreement`` search (issue 44): measured sensitivity, a ranking
by gain per multiply-accumulate kept in fp16, and a bisection over the prefixes of that ranking.

AIMET's mixed-precision way, on Marvell's fixed int8 recipe:

- **sensitivity**: every candidate layer (a keepable int8 Conv2D/FC layer, at most
  ``MEASURED_LAYERS`` of them, those whose isolated SNR says they add most noise per
  multiply-accumulate first) is given back to fp16 alone, everything else int8, and the output
  SNR of that trial against the fp32 outputs is measured on the choice samples. Its **gain** is
  the output noise power (relative to the signal) it removes against the all-int8 model: a
  continuous figure, where top-1 over a few dozen samples is mostly ties. The fp32 outputs are
  computed once per sample and measured against by every trial (``tune/agreement.py``);
- **rank**: by gain per multiply-accumulate the layer takes to fp16, most first; layers with no
  gain, and those not measured, after, in their isolated order;
- **bisect**: the smallest prefix of the ranking whose choice-sample agreement reaches the
  target, assuming (as AIMET does) that a longer prefix does not agree less. The whole ranking
  is tried first: if even it does not reach the target, the shortest prefix that agrees as well
  as the whole ranking does is sought the same way, and none is kept when the whole ranking
  agrees no better than int8 alone (keeping layers that buy nothing costs MACs for nothing). Every
  prefix tried is a point of the curve, measured on the held-out samples too (int8 MAC share
  against held-out agreement); the held-out figures never decide anything.

- requires: a ``measure`` callable that quantizes, converts and measures a set of float nodes
  (``keep_fp16._Trial``);
- ensures: ``bisect`` returns the prefix length chosen and every point tried, in the order tried;
  the chosen prefix, when the target was reached on a point tried, is the shortest such point.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mrvl_convert.tune.agreement import Agreement
from mrvl_convert.verify.quant_report import LayerQuality

MEASURED_LAYERS = 64  # layers whose sensitivity is measured: one quantize + convert each


@dataclass
class Ranked:
    """A candidate layer: its analysis row, its multiply-accumulates and, when measured, the
    output SNR (dB) of the model with only it in fp16 and the noise power that removes."""

    row: LayerQuality
    macs: int
    output_snr_db: Optional[float] = None
    gain: Optional[float] = None

    @property
    def gain_per_mac(self) -> Optional[float]:
        return None if self.gain is None else self.gain / max(self.macs, 1)

    def to_dict(self) -> Dict[str, object]:
        return {"layer": self.row.layer, "nodes": list(self.row.op_nodes), "macs": self.macs,
                "isolated_snr_db": self.row.isolated_snr_db,
                "output_snr_db": self.output_snr_db, "gain_per_mac": self.gain_per_mac}


@dataclass
class Point:
    """A prefix tried: its length, the int8 MAC share, its figures on the choice samples
    (``agreement``, ``snr_db``: these decide) and the held-out ones (``held_out``)."""

    prefix: int
    int8_mac_share: Optional[float]
    agreement: Optional[float]
    held_out: Optional[float]
    snr_db: Optional[float]
    reaches: bool
    key: Tuple[float, float] = field(default=(-1.0, 0.0), compare=False)
    recipes: int = 0  # layers given a recipe of their own (tune/layer_recipes.py)

    def to_dict(self) -> Dict[str, object]:
        return {"prefix": self.prefix, "int8_mac_share": self.int8_mac_share,
                "agreement": self.agreement, "held_out": self.held_out,
                "snr_db": self.snr_db, "reaches": self.reaches, "recipes": self.recipes}


def noise(snr_db: Optional[float]) -> float:
    """Noise power over signal power of an output SNR (None: no error)."""
    return 0.0 if snr_db is None else 10 ** (-snr_db / 10)


def rank(candidates: Sequence[Ranked], base: Agreement,
         measure_choice: Callable[[LayerQuality], Agreement],
         limit: int = MEASURED_LAYERS) -> List[Ranked]:
    """The candidates (in their isolated order) measured, the first ``limit``, and sorted by
    gain per multiply-accumulate (module docstring)."""
    for item in candidates[:limit]:
        item.output_snr_db = measure_choice(item.row).snr_db
        item.gain = noise(base.snr_db) - noise(item.output_snr_db)
    gaining = [c for c in candidates if c.gain is not None and c.gain > 0]
    rest = [c for c in candidates if c not in gaining]
    return sorted(gaining, key=lambda c: -c.gain_per_mac) + rest


def bisect(count: int, budget: int, try_prefix: Callable[[int], Point], start: Point
           ) -> Tuple[Point, List[Point]]:
    """The shortest prefix of ``count`` whose point reaches the target, in at most ``budget``
    tries (``start``: prefix 0, already measured). When even the whole ranking does not reach
    it, the shortest prefix that agrees as well as the whole ranking does, or none when that is
    no better than int8 alone: layers that buy nothing are not kept. Returns (the point chosen,
    the points tried in order)."""
    tried: List[Point] = []
    if start.reaches or count == 0 or budget <= 0:
        return start, tried
    full = try_prefix(count)
    tried.append(full)
    if full.reaches:
        return _shortest(full, lambda p: p.reaches, budget, try_prefix, tried), tried
    if _value(full) <= _value(start):
        return start, tried
    best = _value(full)
    return _shortest(full, lambda p: _value(p) >= best, budget, try_prefix, tried), tried


def _value(point: Point) -> float:
    return -1.0 if point.agreement is None else point.agreement


def _shortest(full: Point, good: Callable[[Point], bool], budget: int,
              try_prefix: Callable[[int], Point], tried: List[Point]) -> Point:
    """Bisection between prefix 0 (not good) and ``full`` (good), appending to ``tried``."""
    low, high, chosen = 0, full.prefix, full
    while high - low > 1 and len(tried) < budget:
        mid = (low + high) // 2
        point = try_prefix(mid)
        tried.append(point)
        if good(point):
            high, chosen = mid, point
        else:
            low = mid
    return chosen


def share(kept: Sequence[str], macs: Mapping[str, int], total: int) -> Optional[float]:
    """The share of the model's multiply-accumulates not kept in float."""
    if not total:
        return None
    return 1.0 - sum(macs.get(n, 0) for n in set(kept)) / total


__all__: List[str] = ["MEASURED_LAYERS", "Point", "Ranked", "bisect", "noise", "rank", "share"]
