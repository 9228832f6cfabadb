"""Which samples are evidence for what: the split of a user's data into the samples that choose
(calibrate a quantizer, pick the layers a remedy keeps) and the samples that judge (verify), and
the record of where a verdict's samples came from.

A verdict judged on the samples it was fitted on says little (issue 40): calibration data is split
once, the same way for every caller, so that the samples ``--verify`` takes from it are ones the
quantizer never saw, and ``auto`` remedies choose on one part and report the verdict on the other.

- requires: a sample count; the seed is fixed so the same data splits the same way every run
  (artifacts stay byte-identical);
- ensures: ``choose`` and ``judge`` are disjoint, sorted, and together every index; ``judge`` is
  empty only when there are fewer than two samples (nothing can be held out of one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple, TypeVar

import numpy as np

# --verify judges at least this many samples by default: one row of top-1 agreement is a coin
# toss, and a single random sample is out of distribution for an image model.
DEFAULT_VERIFY_SAMPLES = 8
# The share of calibration data held out of calibration for verify.
CALIBRATION_HOLDOUT = 0.25
# The share of the data an ``auto`` remedy keeps back to judge its choice on.
REMEDY_HOLDOUT = 0.5
_SEED = 20261128

T = TypeVar("T")

# Where a verify sample came from (``SampleOrigin.counts`` keys), in the order they are used.
VERIFY_INPUTS = "verify_inputs"
HELD_OUT = "held_out_calibration"
RANDOM = "random"
GIVEN = "given"
_WORDS = {VERIFY_INPUTS: "from --verify-inputs", HELD_OUT: "held out of calibration",
          RANDOM: "random", GIVEN: "given"}


@dataclass(frozen=True)
class SampleSplit:
    """Indices into a set of samples: those that choose, those that judge."""

    choose: Tuple[int, ...]
    judge: Tuple[int, ...]

    def take(self, items: Sequence[T]) -> Tuple[List[T], List[T]]:
        """``items`` (one per sample) as (choose, judge) lists."""
        return [items[i] for i in self.choose], [items[i] for i in self.judge]

    def take_stacked(self, arrays: Dict[str, np.ndarray]) -> Tuple[Dict[str, np.ndarray],
                                                                  Dict[str, np.ndarray]]:
        """Stacked arrays (samples on axis 0, e.g. calibration data) as (choose, judge)."""
        choose = {k: a[list(self.choose)] for k, a in arrays.items()}
        judge = {k: a[list(self.judge)] for k, a in arrays.items()}
        return choose, judge


def split(count: int, held_out: float) -> SampleSplit:
    """Split ``count`` samples, holding out ``held_out`` of them (at least one, and at least one
    left to choose, when ``count >= 2``) by a fixed permutation."""
    if count < 0 or not 0.0 < held_out < 1.0:
        raise ValueError(f"split({count}, {held_out}): a count >= 0 and a share in (0, 1)")
    if count < 2:
        return SampleSplit(tuple(range(count)), ())
    judged = min(count - 1, max(1, int(round(count * held_out))))
    order = np.random.default_rng(_SEED).permutation(count)
    return SampleSplit(tuple(sorted(int(i) for i in order[judged:])),
                       tuple(sorted(int(i) for i in order[:judged])))


def calibration_split(count: int) -> SampleSplit:
    """Calibration data: ``choose`` calibrates, ``judge`` is held out for verify."""
    return split(count, CALIBRATION_HOLDOUT)


def remedy_split(count: int) -> SampleSplit:
    """An ``auto`` remedy's data: ``choose`` picks the layers, ``judge`` gives the verdict."""
    return split(count, REMEDY_HOLDOUT)


@dataclass(frozen=True)
class SampleOrigin:
    """How many samples a verdict is over and where they came from (``counts``: origin key ->
    number, in the order used)."""

    counts: Tuple[Tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(n for _, n in self.counts)

    def describe(self) -> str:
        """e.g. "8 samples: 2 held out of calibration, 6 random"."""
        parts = [f"{n} {_WORDS.get(k, k)}" for k, n in self.counts if n]
        noun = "sample" if self.total == 1 else "samples"
        return f"{self.total} {noun}: {', '.join(parts)}" if parts else f"0 {noun}"

    def to_dict(self) -> Dict[str, Any]:
        return {"count": self.total, "from": {k: n for k, n in self.counts if n}}
