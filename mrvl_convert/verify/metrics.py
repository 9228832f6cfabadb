"""The figures a comparison reports: errors, cosine, top-1 agreement, SNR.

Pure arithmetic on arrays, folded one sample at a time so that nothing of a sample is kept:

- ``Worst`` (``compare``): the worst case over samples of one tensor's max abs error, max abs
  error relative to the reference's peak, and cosine, judged against a ``Tolerance``;
- ``top1``: the share of rows whose argmax agrees, for classifier-like outputs;
- ``Top1`` (``compare``): the same, with each flip sorted into counted or near tie: a flip
  counts only where fp32's margin between its two best classes exceeds the error bound of that
  output in that sample (``Tolerance.bound``): within it, fp32 itself cannot say which class
  is first to the precision judged, and the flip is the tie's, not the conversion's;
- ``Sums`` (``analyze_quantization``): the sums SNR and cosine are made of, over every element
  of every sample, and ``snr_db`` / ``cosine`` of them.

Sums are taken in float64; an inf or NaN value makes the figures inf or NaN, never an error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from mrvl_convert.verify.tolerances import Tolerance


@dataclass
class Worst:
    """The worst case over samples of one float tensor's errors, folded in one sample at a
    time: max abs error, max abs error / max|ref|, lowest cosine; a shape mismatch instead
    when one is seen."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    cosine: float = 1.0
    finite: bool = True
    mismatch: Optional[Tuple[List[int], List[int]]] = None
    # (max abs error, max |fp32|, cosine) of every sample: the bound max(atol, rtol * peak) is
    # a sample's own, and folding errors and peaks apart would judge mixed pairs.
    samples: List[Tuple[float, float, float]] = field(default_factory=list)

    def add(self, got: np.ndarray, want: np.ndarray, *, reshape: bool = False) -> None:
        if reshape and got.size == want.size:
            got = got.reshape(want.shape)  # already in the model's element order
        if got.shape != want.shape:
            self.mismatch = self.mismatch or (list(got.shape), list(want.shape))
            return
        g64, w64 = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
        with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN values: handled below
            err = float(np.abs(g64 - w64).max(initial=0.0))
            scale = float(np.abs(w64).max(initial=0.0))
            rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
            norms = float(np.linalg.norm(g64) * np.linalg.norm(w64))
            if norms > 0:
                cos = float(np.dot(g64, w64) / norms)
            else:
                cos = 1.0 if err == 0 else 0.0
        if not np.isfinite(err):
            err, rel, cos = float("inf"), float("inf"), float("nan")
        self.max_abs, self.max_rel = max(self.max_abs, err), max(self.max_rel, rel)
        self.samples.append((err, scale, cos))
        self.cosine = min(self.cosine, cos) if np.isfinite(cos) else float("nan")
        self.finite = self.finite and bool(np.isfinite(got).all())

    def within(self, tol: Tolerance) -> bool:
        """Finite, and in every sample the error within max(atol, max_rel * peak) and, unless
        the error is below the absolute floor, the cosine bound (top-1 is the caller's)."""
        return self.finite and all(e <= tol.bound(s) and (e <= tol.atol or c >= tol.min_cosine)
                                   for e, s, c in self.samples)

    def below_floor(self, tol: Tolerance) -> bool:
        return self.max_abs <= tol.atol


def top1(got: List[np.ndarray], want: List[np.ndarray]) -> Optional[float]:
    """Share of rows whose argmax agrees, for classifier-like [N, K>1] tensors."""
    if want[0].ndim != 2 or want[0].shape[1] < 2:
        return None
    agree = sum(int((g.argmax(axis=1) == w.argmax(axis=1)).sum()) for g, w in zip(got, want))
    return agree / sum(w.shape[0] for w in want)


@dataclass
class Top1:
    """Top-1 agreement of one ``[N, K>1]`` output over samples, folded one sample at a time.
    ``decisive``: the sample may decide a FAIL (random inputs never do: a random input gives a
    classifier near-uniform outputs, whose flips say nothing of the conversion)."""

    rows: int = 0
    agree: int = 0
    near_ties: int = 0       # flips where fp32's margin was within the error bound: not counted
    counted: int = 0         # flips counted, on any sample
    decisive_rows: int = 0
    decisive_counted: int = 0

    def add(self, got: np.ndarray, want: np.ndarray, bound: float, decisive: bool) -> None:
        hit = got.argmax(axis=1) == want.argmax(axis=1)
        top2 = np.sort(want.astype(np.float64), axis=1)[:, -2:]
        tie = (top2[:, 1] - top2[:, 0]) <= bound
        counted = int((~hit & ~tie).sum())
        self.rows += len(hit)
        self.agree += int(hit.sum())
        self.near_ties += int((~hit & tie).sum())
        self.counted += counted
        if decisive:
            self.decisive_rows += len(hit)
            self.decisive_counted += counted

    @property
    def share(self) -> Optional[float]:
        """The share of rows whose argmax agrees, every flip included (``top1``)."""
        return self.agree / self.rows if self.rows else None

    def passes(self, min_top1: float) -> bool:
        """The counted flips of the decisive samples leave agreement >= ``min_top1``."""
        if not self.decisive_rows:
            return True
        return 1.0 - self.decisive_counted / self.decisive_rows >= min_top1


def is_classifier(want: np.ndarray) -> bool:
    """A tensor top-1 is asked of: ``[N, K>1]``."""
    return want.ndim == 2 and want.shape[1] >= 2


@dataclass
class Sums:
    """sum(ref^2), sum((ref - x)^2), sum(ref * x), sum(x^2) over every element of every sample."""

    ref2: float = 0.0
    err2: float = 0.0
    dot: float = 0.0
    x2: float = 0.0

    def add(self, x: np.ndarray, ref: np.ndarray) -> None:
        x64, r64 = x.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
        self.ref2 += float(r64 @ r64)
        self.err2 += float(((r64 - x64) ** 2).sum())
        self.dot += float(r64 @ x64)
        self.x2 += float(x64 @ x64)


def snr_db(sums: Sums) -> float:
    """10 log10(sum(ref^2) / sum((ref - x)^2)); +inf when x equals ref."""
    if sums.err2 == 0.0 or not math.isfinite(sums.err2):
        return math.inf if sums.err2 == 0.0 else -math.inf
    if sums.ref2 == 0.0:
        return -math.inf
    return 10.0 * math.log10(sums.ref2 / sums.err2)


def cosine(sums: Sums) -> float:
    norms = math.sqrt(sums.ref2 * sums.x2)
    if norms == 0.0:
        return 1.0 if sums.err2 == 0.0 else 0.0
    return sums.dot / norms


def json_snr(out: Dict[str, Any], keys: Iterable[str]) -> Dict[str, Any]:
    """``out`` with each SNR of ``keys`` JSON can hold: JSON has no infinity, so an exact
    figure (+inf dB) becomes null with ``<name>_exact``: true (``snr_db`` -> ``exact``)."""
    for key in keys:
        value = out[key]
        if value is not None and not math.isfinite(value):
            out[key] = None
            out[key.replace("snr_db", "exact")] = value > 0
    return out
