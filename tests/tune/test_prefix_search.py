"""``tune/prefix_search.py``: the ranking by measured gain per multiply-accumulate and the
bisection over its prefixes, on figures given by hand."""
from __future__ import annotations

from typing import Dict, List

import pytest

from mrvl_convert.tune.agreement import Agreement
from mrvl_convert.tune.prefix_search import Point, Ranked, bisect, noise, rank
from mrvl_convert.verify.quant_report import LayerQuality


def point(k: int, agreement: float, target: float = 0.95) -> Point:
    return Point(k, 1.0 - k / 10, agreement, agreement, 20.0, agreement >= target,
                 (agreement, 20.0))


@pytest.mark.parametrize("first, count, budget, tried", [
    (7, 10, 8, [10, 5, 7, 6]),   # shortest reaching prefix: 7 (6 does not)
    (1, 10, 8, [10, 5, 2, 1]),
    (10, 10, 8, [10, 5, 7, 8, 9]),
    (7, 10, 2, [10, 5]),         # the budget ends it: the shortest reaching prefix tried (10)
])
def test_bisection_finds_the_shortest_reaching_prefix_in_order(first, count, budget, tried):
    seen: List[int] = []

    def try_prefix(k: int) -> Point:
        seen.append(k)
        return point(k, 0.99 if k >= first else 0.5)

    chosen, points = bisect(count, budget, try_prefix, point(0, 0.5))
    assert seen == tried and [p.prefix for p in points] == tried
    reached = [k for k in tried if k >= first]
    assert chosen.prefix == min(reached)


def test_a_target_the_whole_ranking_misses_keeps_the_shortest_prefix_as_good_as_it():
    """Target 0.95; the whole ranking of 8 agrees 0.8 from prefix 3 on: prefix 3 is kept.
    When the whole ranking agrees no better than int8 alone (0.5), nothing is kept."""
    seen: List[int] = []

    def try_prefix(k: int) -> Point:
        seen.append(k)
        return point(k, 0.8 if k >= 3 else 0.6)

    chosen, points = bisect(8, 8, try_prefix, point(0, 0.5))
    assert seen == [8, 4, 2, 3] and chosen.prefix == 3 and not chosen.reaches
    chosen, points = bisect(4, 8, lambda k: point(k, 0.5), point(0, 0.5))
    assert [p.prefix for p in points] == [4] and chosen.prefix == 0


def test_a_target_int8_reaches_or_no_budget_tries_nothing():
    for start, budget in ((point(0, 0.99), 8), (point(0, 0.5), 0)):
        chosen, points = bisect(3, budget, lambda k: pytest.fail("tried"), start)
        assert chosen is start and points == []


def row(name: str, snr: float) -> LayerQuality:
    return LayerQuality("s", name, "Conv2D", "int8", name, [name], isolated_snr_db=snr)


def test_rank_orders_by_measured_gain_per_mac_not_by_isolated_snr():
    """base output SNR 10 dB (noise 0.1). 'loud' has the worst isolated SNR but removes no
    output noise; 'quiet' removes 0.09 over 100 MACs, 'big' 0.099 over 1000: quiet, big,
    then loud (no gain) after."""
    measured: Dict[str, float] = {"loud": 10.0, "quiet": 20.0, "big": 30.0}
    candidates = [Ranked(row("loud", 1.0), 10), Ranked(row("quiet", 15.0), 100),
                  Ranked(row("big", 12.0), 1000)]
    ranked = rank(candidates, Agreement({"y": 0.5}, 4, 10.0),
                  lambda r: Agreement({"y": 0.5}, 4, measured[r.layer]))
    assert [r.row.layer for r in ranked] == ["quiet", "big", "loud"]
    assert ranked[0].gain == pytest.approx(noise(10.0) - noise(20.0))
    assert ranked[0].to_dict()["output_snr_db"] == 20.0


def test_rank_measures_at_most_the_limit_and_keeps_the_rest_in_isolated_order():
    calls: List[str] = []

    def measure(r: LayerQuality) -> Agreement:
        calls.append(r.layer)
        return Agreement({"y": 0.5}, 4, 20.0)

    candidates = [Ranked(row(n, 5.0), 10) for n in "abcd"]
    ranked = rank(candidates, Agreement({"y": 0.5}, 4, 10.0), measure, limit=2)
    assert calls == ["a", "b"] and [r.row.layer for r in ranked] == list("abcd")
    assert ranked[2].output_snr_db is None and ranked[2].to_dict()["gain_per_mac"] is None
