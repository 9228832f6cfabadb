"""Marvell's pass criterion (compare_json.py's rule) at the edges of its bounds."""
from __future__ import annotations

import numpy as np
import pytest

from mrvl_convert.verify.criteria import (MarvellCriterion, check_name, marvell_criterion,
                                          quantize_of)

CRIT = marvell_criterion()


def _check(test, base, quantize="fp16"):
    return CRIT.check(np.array(test, dtype=np.float64), np.array(base, dtype=np.float64),
                      quantize)


@pytest.mark.parametrize("value", [102.9, 97.1, 103.0 - 1e-9, 97.0 + 1e-9])
def test_within_3_percent_passes(value):
    assert _check([value, 1.0], [100.0, 1.0]).passed


@pytest.mark.parametrize("value", [103.1, 96.9])
def test_3_1_percent_fails_and_names_the_element(value):
    result = _check([1.0, value], [1.0, 100.0])
    assert not result.passed
    assert (result.index, result.got, result.want) == (1, value, 100.0)
    assert "flat index 1" in result.describe("out")


def test_negative_base_uses_its_magnitude():
    assert _check([-102.9], [-100.0]).passed
    assert not _check([-103.1], [-100.0]).passed


def test_element_under_max_over_100_is_ignored_and_just_over_is_counted():
    # max|base| = 100: an element of 0.99 has ratio 101 > 100 (ignored), 1.01 ratio 99 (counted)
    assert _check([100.0, 5.0], [100.0, 0.99]).passed
    result = _check([100.0, 5.0], [100.0, 1.01])
    assert not result.passed and result.index == 1
    assert _check([100.0, 5.0], [100.0, 1.0]).passed is False  # ratio exactly 100: counted


def test_zero_reference_element_is_judged_by_the_test_value():
    # base 0, test 50: ratio |100 / 50| = 2 -> counted, and 50 is not within 3% of 0
    assert not _check([100.0, 50.0], [100.0, 0.0]).passed
    # base 0, test 0.5: ratio 200 -> ignored
    assert _check([100.0, 0.5], [100.0, 0.0]).passed
    assert _check([0.0, 0.0], [0.0, 0.0]).passed


def test_int8_step_rule():
    # max|test| = 127 -> unit 1; bits off = ceil(|d| / 0.5) - 1: |d| = 2 gives 3 (passes),
    # |d| = 2.01 gives 4 (fails); the element of 10 is far outside 3%
    assert _check([127.0, 12.0], [127.0, 10.0], "int8").passed
    result = _check([127.0, 12.01], [127.0, 10.0], "int8")
    assert not result.passed and result.index == 1
    # the same errors fail the fp16 rule
    assert not _check([127.0, 12.0], [127.0, 10.0], "fp16").passed


def test_int8_unit_is_of_the_test_tensor():
    bits = MarvellCriterion.bits_off(np.array([254.0, 4.0]), np.array([127.0, 0.0]))
    # unit = max|test| / 127 = 2 (of the base it would be 1, and element 1 would be 7 off)
    assert bits.tolist() == [126.0, 3.0]


def test_saturated_base_only_warns_in_the_script():
    assert _check([65504.0, 65000.0], [65504.0, 65504.0]).passed


def test_shape_mismatch_fails():
    result = CRIT.check(np.zeros(3), np.zeros(4))
    assert not result.passed and "4" in result.describe("y")


def test_criterion_names_and_quantize():
    assert check_name("marvell") == "marvell"
    with pytest.raises(ValueError, match="ours, marvell"):
        check_name("strict")
    assert quantize_of({"quantization": {"file": "x.int8.onnx"}}) == "int8"
    assert quantize_of({}) == "fp16"
