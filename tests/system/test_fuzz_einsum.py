"""Property tests over an Einsum of one or two operands (tests/support/strategies/einsum.py):
every drawn equation is rewritten (but an identity) (frontend/einsum_forms.py) and the canonical graph computes on
onnxruntime what the model does within the stated bound (``2 gamma_n sum |products|``)."""
from __future__ import annotations

import pytest
from hypothesis import event, given, settings

from support.strategies.einsum import einsum_cases, within_bound

pytestmark = pytest.mark.system


@settings(deadline=None)
@given(einsum_cases())
def test_rewrite_is_within_the_bound(case):
    canonical, ops = within_bound(case)
    kept = canonical.kept.get("einsum", "")
    assert "Einsum" not in ops or "moves nothing" in kept, (case, kept)
    event(" -> ".join(ops))


@settings(deadline=None)
@given(einsum_cases(two=True))
def test_two_operands_are_within_the_bound(case):
    canonical, ops = within_bound(case)
    assert "Einsum" not in ops, (case, canonical.kept.get("einsum"))
    event("MatMul" if "MatMul" in ops else "Mul" if "Mul" in ops else "other")
