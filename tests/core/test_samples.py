"""The split of samples into those that choose and those that judge (core/samples.py)."""
import numpy as np
import pytest

from mrvl_convert.core.samples import (HELD_OUT, RANDOM, SampleOrigin, calibration_split,
                                       remedy_split, split)


@pytest.mark.parametrize("count", range(0, 40))
def test_split_is_a_partition_with_both_sides_when_it_can(count):
    for s in (calibration_split(count), remedy_split(count)):
        assert sorted(s.choose + s.judge) == list(range(count))
        assert not set(s.choose) & set(s.judge)
        if count >= 2:
            assert s.choose and s.judge
        else:
            assert not s.judge


def test_split_is_fixed_and_holds_out_its_share():
    assert calibration_split(64) == calibration_split(64)
    assert len(calibration_split(64).judge) == 16
    assert len(remedy_split(96).judge) == 48
    # a permutation, not the last rows: data sorted by class is not held out as one class
    assert calibration_split(64).judge != tuple(range(48, 64))


def test_take_stacked_keeps_samples_apart():
    data = {"x": np.arange(10)[:, None]}
    choose, judge = calibration_split(10).take_stacked(data)
    assert set(choose["x"][:, 0]).isdisjoint(judge["x"][:, 0])
    assert len(choose["x"]) + len(judge["x"]) == 10


def test_split_refuses_a_share_outside_0_1():
    with pytest.raises(ValueError):
        split(10, 1.0)


def test_origin_says_what_it_holds():
    origin = SampleOrigin(((HELD_OUT, 2), (RANDOM, 6)))
    assert origin.describe() == "8 samples: 2 held out of calibration, 6 random"
    assert origin.to_dict() == {"count": 8, "from": {HELD_OUT: 2, RANDOM: 6}}
