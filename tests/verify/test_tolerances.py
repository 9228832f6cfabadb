"""The tolerance a compared tensor must meet: max(atol, max_rel * peak), cosine and top-1 only
above the absolute floor, each sample judged against its own peak; --atol/--rtol parsing."""
from __future__ import annotations

import numpy as np
import pytest

from mrvl_convert.verify.metrics import Worst as _Worst
from mrvl_convert.verify.tolerances import (DEFAULT_TOLERANCE, Tolerance, Tolerances,
                                             parse_tolerance_specs)


def worst(*pairs) -> _Worst:
    folded = _Worst()
    for got, want in pairs:
        folded.add(np.asarray(got, np.float32), np.asarray(want, np.float32))
    return folded


def test_a_small_valued_tensor_passes_by_the_floor_and_fails_without_it() -> None:
    want = np.linspace(0.002, 0.009, 50, dtype=np.float32)      # a faint sigmoid output
    got = want + np.float32(1.9e-4)                             # 2% of its own peak
    folded = worst((got, want))
    assert folded.max_rel > DEFAULT_TOLERANCE.max_rel
    assert folded.within(DEFAULT_TOLERANCE)
    assert not folded.within(Tolerance(reason="no floor"))      # a hand-made Tolerance: atol 0


def test_an_error_above_the_floor_is_judged_relative_to_the_peak() -> None:
    want = np.linspace(-3, 3, 50, dtype=np.float32)
    assert worst((want + np.float32(0.02), want)).within(DEFAULT_TOLERANCE)      # 0.7% of 3
    assert not worst((want + np.float32(0.05), want)).within(DEFAULT_TOLERANCE)  # 1.7%


def test_cosine_is_asked_only_above_the_floor() -> None:
    want = np.full(8, 1e-4, np.float32)
    want[::2] = -1e-4
    got = -want                                                 # wholly wrong, but tiny
    folded = worst((got, want))
    assert folded.cosine < 0 and folded.max_abs < DEFAULT_TOLERANCE.atol
    assert folded.within(DEFAULT_TOLERANCE)
    assert not folded.within(Tolerance(max_rel=10.0, reason="rel only, no floor"))


def test_each_sample_is_judged_against_its_own_peak() -> None:
    """Sample 1: error 0.5 on a peak of 100 (0.5%: within rtol); sample 2: error 2e-4 on a peak
    of 0.005 (4%, but below the floor). Each passes its own bound; judging the folded worst
    error (0.5, above the floor) with the folded worst ratio (4%) would fail the pair."""
    big = np.array([100.0, -50.0], np.float32)
    small = np.array([0.005, -0.002], np.float32)
    folded = worst((big + np.float32(0.5), big), (small + np.float32(2e-4), small))
    assert folded.max_abs > DEFAULT_TOLERANCE.atol
    assert folded.max_rel > DEFAULT_TOLERANCE.max_rel
    assert folded.within(DEFAULT_TOLERANCE)
    assert not worst((small + np.float32(1e-3), small)).within(DEFAULT_TOLERANCE)


def test_non_finite_values_never_pass() -> None:
    folded = worst(([np.inf, 1.0], [1.0, 1.0]))
    assert folded.max_abs == np.inf and not folded.within(Tolerance(max_rel=1e9, atol=1e9,
                                                                      reason="any"))


def test_with_bounds_sets_defaults_and_overrides_with_a_reason() -> None:
    tols = Tolerances().with_bounds({None: 1e-3, "scores": 0.0}, {"boxes": 0.05}, "given here")
    assert (tols.default.atol, tols.default.max_rel) == (1e-3, DEFAULT_TOLERANCE.max_rel)
    scores = tols.for_tensor("scores")
    assert (scores.atol, scores.reason) == (0.0, "given here")
    assert (tols.for_tensor("boxes").atol, tols.for_tensor("boxes").max_rel) == (1e-3, 0.05)
    assert Tolerances().with_bounds({}, {}, "unused") == Tolerances()


def test_parse_tolerance_specs() -> None:
    assert parse_tolerance_specs(["1e-3", "scores:0.02", "out:0:5e-3"], "--atol") == \
        {None: 1e-3, "scores": 0.02, "out:0": 5e-3}
    for bad, message in (("x:abc", "expected a number"), ("-1", ">= 0"), ("nan", ">= 0"),
                         ("inf", ">= 0")):
        with pytest.raises(ValueError, match=message):
            parse_tolerance_specs([bad], "--atol")
    with pytest.raises(ValueError, match="two different values"):
        parse_tolerance_specs(["y:1", "y:2"], "--rtol")
