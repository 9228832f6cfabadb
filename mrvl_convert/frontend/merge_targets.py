"""Where each merged node went, settled once every rewrite has run.

A rewrite records a node it removes as ``merged`` into the node that now computes it. A later
rewrite may remove that node in turn: merge it again (a chain), drop a node an earlier rewrite
added (an added node recorded as merged too, so the chain goes on), or leave an added node
unread for the cleanup to drop (space_to_batch's second Conv reads the first one's float
output again and re-quantizes it itself, so the first one's trailing Q/DQ copies go). Each
merge is followed here to a node of the final graph: through ``merged`` and, from an added node
that is gone, to the node it was derived from. A merge that reaches neither is reported as
removed with why, instead of naming a node no stage holds.

Requires: ``merged`` (node -> node computing it now, possibly a chain through added nodes),
``derived`` (added node -> node it comes from) and the final graph's node names.
Ensures: returns (merged, removed): every merged value is a node of the graph; a node whose
merges lead nowhere is in ``removed`` (name -> reason) and not in ``merged``. Nothing else
changes; the result is one pass over the entries (each chain walked once, memoised).
"""
from __future__ import annotations

from typing import Dict, Optional, Set, Tuple


def settle_merges(merged: Dict[str, str], derived: Dict[str, str], left: Set[str]
                  ) -> Tuple[Dict[str, str], Dict[str, str]]:
    """Each merged node's target followed to a node in ``left``; the ones with none, removed."""
    settled: Dict[str, Optional[str]] = {}
    out: Dict[str, str] = {}
    removed: Dict[str, str] = {}
    for name, into in merged.items():
        target = _follow(into, merged, derived, left, settled)
        if target is not None:
            out[name] = target
        else:
            removed[name] = (f"merged into {into}, which a later rewrite removed (its "
                             f"output unused)")
    return out, removed


def _follow(start: str, merged: Dict[str, str], derived: Dict[str, str], left: Set[str],
            settled: Dict[str, Optional[str]]) -> Optional[str]:
    path, name, seen = [], start, set()
    while name not in left and name not in settled and name not in seen:
        seen.add(name)
        path.append(name)
        nxt = merged.get(name, derived.get(name))
        if nxt is None:
            break
        name = nxt
    target = name if name in left else settled.get(name)
    for step in path:  # memoised: a long chain shared by many merges is walked once
        settled[step] = target
    return target
