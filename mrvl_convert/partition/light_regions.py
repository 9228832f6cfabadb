"""Which Mrvl regions without compute go back to the CPU, and where CPU work with no accelerator
work before it runs: the ``multi`` policy's choices beyond earliest-stage assignment.

Upstream (Marvell's mrvl.py) sends every accelerator region without a Conv2D/FC back to the CPU.
That is right for a region that stands alone, but a region of data movement (Reshape, Transpose,
Softmax, a quantize pair) between two accelerator regions that goes to the CPU leaves the CPU ops
around it cutting the model: a QDQ transformer fell into dozens of pieces that way. Three plans
are therefore made (``PLANS``: upstream's, upstream's with the first two changes of ``joined``
below, and ``joined``) and the one with fewer Mrvl stages wins (then fewer stages; a tie keeps
the earlier plan, upstream's first):

- ``upstream``: every stage with fewer than ``minimum`` compute-heavy units goes to the CPU, and
  CPU units take the earliest CPU stage after the first Mrvl one (as before).
- ``joined``: a light stage with a compute-heavy Mrvl unit both before and after it (through any
  path) stays on Mrvl and joins its neighbours; a light one that stands alone goes to the CPU
  as upstream decides, and so does a light group of connected Mrvl units inside a stage that
  touches no other Mrvl unit (a mask's Reshape read only by CPU ops, beside the FCs of the first
  stage); CPU units with no Mrvl unit before them run first, in a CPU stage before the first Mrvl
  stage (a mask computed from an input no longer waits for the first Mrvl stage and cuts the
  next).

A light region sent to the CPU is demoted with the CPU ops it reads and feeds (``cpu_around``),
so its reason names what cuts the model there, not only that the region has no Conv2D/FC.

Requires: units in topological order (``Unit.preds`` are lower indices), ``mrvl`` the indices
bound for the accelerator.
Ensures: ``settle`` returns the stage of every unit (even: Mrvl, odd: CPU; the ``joined`` plan
and the plan between may use -1 for the CPU prefix) and updates ``mrvl`` and ``demoted`` in place; every unit's stage
is at least each of its preds' (plus one across colours), so stages stay a topological order.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Set, Tuple

from mrvl_convert.ir.stages import Unit

Demote = Callable[[Unit, str, str], None]  # unit, "region" or "group", the CPU ops around it


def assign(units: Sequence[Unit], mrvl: Set[int], prefix: bool = False) -> Dict[int, int]:
    """Earliest stage per unit: even stages are Mrvl, odd stages CPU; with ``prefix``, a CPU
    unit with no Mrvl unit before it goes to stage -1."""
    stage: Dict[int, int] = {}
    for unit in units:
        colour = 0 if unit.index in mrvl else 1
        lowest = -1 if prefix and colour else colour
        for p in unit.preds:
            same = (p in mrvl) == (unit.index in mrvl)
            lowest = max(lowest, stage[p] if same else stage[p] + 1)
        if lowest % 2 != colour:
            lowest += 1
        stage[unit.index] = lowest
    return stage


def _users(units: Sequence[Unit]) -> List[List[int]]:
    """Per unit, the units reading it (its ``preds`` turned around), in unit order."""
    users: List[List[int]] = [[] for _ in units]
    for unit in units:
        for p in unit.preds:
            users[p].append(unit.index)
    return users


def _heavy_reach(units: Sequence[Unit], mrvl: Set[int], users: Sequence[Sequence[int]]
                 ) -> Tuple[List[bool], List[bool]]:
    """Per unit: a compute-heavy Mrvl unit strictly before it / strictly after it."""
    before = [False] * len(units)
    for unit in units:
        for p in unit.preds:
            before[unit.index] |= before[p] or (units[p].heavy and p in mrvl)
    after = [False] * len(units)
    for unit in reversed(units):
        after[unit.index] = any(after[u] or (units[u].heavy and u in mrvl)
                                for u in users[unit.index])
    return before, after


def _lone_groups(units: Sequence[Unit], mrvl: Set[int], stage: Dict[int, int]) -> List[List[int]]:
    """Groups of Mrvl units connected within one stage, with no compute-heavy unit and no Mrvl
    unit outside the group among their preds and users."""
    parent = {i: i for i in mrvl}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in mrvl:
        for p in units[i].preds:
            if p in mrvl and stage[p] == stage[i]:
                parent[root(p)] = root(i)
    groups: Dict[int, List[int]] = {}
    for i in sorted(mrvl):
        groups.setdefault(root(i), []).append(i)
    touches: Dict[int, bool] = {}
    for unit in units:
        for p in unit.preds:
            if p in mrvl and unit.index in mrvl and root(p) != root(unit.index):
                touches[root(p)] = touches[root(unit.index)] = True
    return [g for r, g in groups.items()
            if not touches.get(r) and not any(units[i].heavy for i in g)]


#: The plans, in the order a tie is decided: (CPU prefix and lone groups, keep a light region
#: between accelerator regions).
PLANS = ((False, False), (True, False), (True, True))


def settle(units: Sequence[Unit], mrvl: Set[int], minimum: int, plan: Tuple[bool, bool],
           demote: Demote) -> Dict[int, int]:
    """Demote light regions until none is left to demote under ``plan`` (one of ``PLANS``:
    upstream's, upstream's with the CPU prefix and lone groups, ``joined``)."""
    prefix, joined = plan
    users = _users(units)
    while True:
        stage = assign(units, mrvl, prefix=prefix)
        light: List[Tuple[int, str, str]] = []
        before, after = _heavy_reach(units, mrvl, users) if joined else ([], [])
        for s in sorted({stage[i] for i in mrvl}):
            members = [i for i in mrvl if stage[i] == s]
            if sum(1 for i in members if units[i].heavy) >= minimum:
                continue
            if joined and any(before[i] for i in members) and any(after[i] for i in members):
                continue  # between two accelerator regions: it joins them
            around = cpu_around(units, members, mrvl, users)
            light.extend((i, "region", around) for i in members)
        if prefix and minimum >= 1:
            light.extend((i, "group", "") for g in _lone_groups(units, mrvl, stage) for i in g)
        if not light:
            return stage
        for i, what, around in light:
            if i in mrvl:
                mrvl.discard(i)
                demote(units[i], what, around)


def cpu_around(units: Sequence[Unit], members: Sequence[int], mrvl: Set[int],
               users: Sequence[Sequence[int]]) -> str:
    """The CPU ops a light region reads and feeds, named (at most 3 each): what cuts the model
    there, so a region's reason points at it ("" when it touches none)."""
    inside = set(members)
    reads = sorted({p for i in members for p in units[i].preds if p not in mrvl} - inside)
    feeds = sorted({u for i in members for u in users[i] if u not in mrvl} - inside)
    parts = [f"{verb} {_names(units, found)}" for verb, found in
             (("reads", reads), ("feeds", feeds)) if found]
    return f"; it {' and '.join(parts)} on CPU" if parts else ""


def _names(units: Sequence[Unit], found: Sequence[int]) -> str:
    names = ", ".join(repr(units[i].nodes[-1].name) for i in found[:3])
    return names + (f" and {len(found) - 3} more" if len(found) > 3 else "")


def mrvl_stage_count(stage: Dict[int, int], mrvl: Set[int]) -> int:
    return len({stage[i] for i in mrvl})
