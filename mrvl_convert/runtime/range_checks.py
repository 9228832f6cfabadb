"""Which rounded values of a graph-engine segment get a range check of their own.

Why: every ``ReduceSum`` over a rounded value is a node per call, and an overflow need only be
seen once on its way to the segment's range output (``graph_engine``'s module docstring).

- requires: a segment's steps in run order, the values it rounds, the nodes read outside it;
- ensures: every overflow to inf or NaN that the per-layer path reports makes the range output
  non-finite (``tests/runtime/test_range_checks.py``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Set, Tuple

#: (producing node index, output slot) of one activation value.
ValueKey = Tuple[int, int]


def range_checks(steps: Sequence[Any], rounded: Set[ValueKey],
                 read_outside: Set[int]) -> List[ValueKey]:
    """Which of the values rounded in a segment get a range check of their own. An overflow
    shows first as an inf in a rounded value; it need not be checked there when some layer
    reading it passes inf and NaN on (``Kernel.passes_nonfinite``) into values that are
    themselves covered, i.e. checked or passing on in turn: one such reader carries the inf to
    a check whatever the other readers do (a hard-swish's ``x`` reaches its Mul2D even though
    ``x + 3`` is clipped). A value read outside the segment (or by nothing) is checked, as are
    the values only saturating layers read (a Clip, a fused Relu): the range output then
    reports exactly the calls where some layer overflowed. A layer that cannot overflow on a
    finite input (``Kernel.finite_on_finite``) needs no check of its own once its input is
    covered: that is settled last, in run order, the decisions before it having counted it
    as not covered."""
    readers: Dict[ValueKey, List[Tuple[Any, int]]] = {}
    for step in steps:
        for index, key in enumerate(zip(step.inputs, step.slots or (0,) * len(step.inputs))):
            readers.setdefault(key, []).append((step, index))
    covered: Dict[ValueKey, bool] = {}
    checks: List[ValueKey] = []
    deferred: List[Any] = []  # steps finite on finite inputs, their output not yet checked

    def settle(key: ValueKey, read_elsewhere: bool, step: Any = None) -> None:
        passed = not read_elsewhere and any(
            reader.kernel.passes_nonfinite(index)
            and all(covered[(reader.node, slot)] for slot in range(_output_count(reader)))
            for reader, index in readers.get(key, ()))
        if key in rounded and not passed and step is not None and not read_elsewhere \
                and step.kernel.finite_on_finite():
            deferred.append(step)
            covered[key] = False
            return
        if key in rounded and not passed:
            checks.append(key)
        covered[key] = passed or key in rounded

    for step in reversed(steps):  # readers come later in a segment: settled first
        for slot in range(_output_count(step)):
            settle((step.node, slot), step.node in read_outside, step)
    for key in sorted(rounded - covered.keys()):  # subgraph inputs rounded here
        settle(key, False)
    for step in reversed(deferred):  # in run order: an earlier one may cover a later one
        if not all(covered.get(key, False) for key in
                   zip(step.inputs, step.slots or (0,) * len(step.inputs))):
            checks.append((step.node, 0))
        covered[(step.node, 0)] = True
    return checks


def _output_count(step: Any) -> int:
    return len(step.spec.out_shapes or (step.spec.shape,))
