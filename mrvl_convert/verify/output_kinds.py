"""Which figure judges an output with one value per sample (an int8 artifact against fp32).

- An output with one value per sample (a VAD's speech probability, a regressor's estimate) has
  a cosine of +-1 whatever its error: it is judged by its largest error over its peak |fp32|
  over the samples instead, and wrecked above ``ONE_VALUE_WRECKED``: an error of half the peak
  is what a vector at the cosine bound 0.9 is off by (its sine, 0.44 of its norm), rounded up.

- requires: fp32 values (and the artifact's) per sample, one array each;
- ensures: pure functions of them, nothing run.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

ONE_VALUE_WRECKED = 0.5


def one_value(values: Sequence[np.ndarray]) -> bool:
    """Every sample of the output holds one value."""
    return bool(values) and all(np.size(v) == 1 for v in values)


def error_over_peak(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """max |got - want| over max |want| over the samples; 0 when equal, inf on a zero peak."""
    err = max((float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
               for g, w in zip(got, want) if np.size(w)), default=0.0)
    peak = max((float(np.max(np.abs(np.asarray(w, np.float64)))) for w in want if np.size(w)),
               default=0.0)
    if err == 0.0:
        return 0.0
    return err / peak if peak > 0 else float("inf")
