"""Stage 4, partition: group composites into Mrvl stages and the rest into CPU stages.

Requires: the canonical graph and its ``MatchPlan``.
Ensures: a ``Plan`` whose stages, in order, are a valid topological order of the graph (every
tensor a stage reads is a graph input, a constant, or an output of an earlier stage), in which
every canonical node is in exactly one stage, and every composite sent back to CPU carries why.

- ``multi``: stages alternate; a unit goes to the earliest stage of its colour that comes after
  every unit it reads from, which keeps contracted regions acyclic by construction. A Mrvl stage
  with fewer than ``min_compute_layers`` compute-heavy layers (Conv2D, FC...; default 1: none at
  all, as upstream decides) is sent back to CPU, and the stages are recomputed until nothing
  changes. ``min_compute_layers=0`` lifts the rule: any matched region runs on Mrvl. Beside
  upstream's plan, ``light_regions.py`` makes one where CPU work with no Mrvl work before it
  runs first and a light region between two accelerator regions joins them; the plan with
  fewer Mrvl stages wins (a tie keeps upstream's).
  With ``max_subgraphs=N`` the N heaviest Mrvl regions stay (by MACs, ``_macs.py``, or by the
  ``rank`` given, e.g. estimated accelerator time), the others go back to CPU, and the stages are
  recomputed until at most N remain.
- ``single``: the RFC's first revision: one Mrvl stage holding the composites reachable from the
  model inputs through composites only, then one CPU stage with everything else (the prefix
  too must hold ``min_compute_layers`` compute-heavy layers).
"""
from __future__ import annotations

import heapq

from typing import Callable, Collection, Dict, Iterable, List, NamedTuple, Optional, Sequence

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import all_inputs, nested_owners
from mrvl_convert.core.macs import total_macs
from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.ir.match import Composite, MatchPlan
from mrvl_convert.ir.stages import Plan, Stage, Unit
from mrvl_convert.layers import layer_kind
from mrvl_convert.partition.light_regions import PLANS, mrvl_stage_count, settle

POLICIES = ("single", "multi")


class Ranking(NamedTuple):
    """How ``max_subgraphs`` weighs a Mrvl region: ``what`` names it in the reason."""
    what: str
    weight: Callable[[Iterable[gs.Node]], float]


def _light_reason(minimum: int) -> str:
    """Why a region with too few compute-heavy layers is not worth the trip to the accelerator."""
    if minimum == 1:
        return "no compute-heavy layer (Conv2D or FC)"
    return f"fewer than {minimum} compute-heavy layers (Conv2D or FC)"


def _heavy(composite: Optional[Composite]) -> bool:
    return composite is not None and layer_kind(composite.rule.layer).compute_heavy


def _too_light(units: Iterable["Unit"], minimum: int) -> bool:
    return sum(1 for u in units if u.heavy) < minimum


def partition(graph: gs.Graph, matches: MatchPlan, policy: str, model_name: str, *,
              max_subgraphs: Optional[int] = None, rank: Optional[Ranking] = None,
              min_compute_layers: int = 1, light: Collection[str] = frozenset()) -> Plan:
    """The stages of ``graph``: ``policy`` one of POLICIES, the counts whole numbers >= 0
    (``ConvertOptions`` checks them once, before any model is read). ``light``: nodes whose
    layers do not count as compute-heavy (a linear Resize written as Conv or MatMul layers:
    interpolation alone is not worth the trip)."""
    units = _units(graph, matches, light)
    mrvl = {u.index for u in units if u.composite is not None}
    demoted: Dict[str, str] = {}
    if policy == "single":
        stages_of = _single(units, mrvl, demoted, min_compute_layers)
    else:
        stages_of = _multi(units, mrvl, demoted, min_compute_layers)
    if max_subgraphs is not None:
        stages_of = _keep_largest(units, mrvl, demoted, stages_of, max_subgraphs, policy,
                                  rank or Ranking("MACs", total_macs), min_compute_layers)
    stages = _build_stages(graph, units, stages_of, mrvl, model_name)
    return Plan(policy, stages, demoted)


def _units(graph: gs.Graph, matches: MatchPlan, light: Collection[str]) -> List[Unit]:
    order = {node.name: i for i, node in enumerate(graph.nodes)}
    raw: List[List[gs.Node]] = []
    comp_of: List[Optional[Composite]] = []
    for composite in matches.composites:
        raw.append(composite.nodes)
        comp_of.append(composite)
    for node in graph.nodes:
        if node.name not in matches.owner:
            raw.append([node])
            comp_of.append(None)
    unit_of = {n.name: i for i, nodes in enumerate(raw) for n in nodes}
    preds: List[set] = [set() for _ in raw]
    for i, nodes in enumerate(raw):
        for node in nodes:
            for tensor in all_inputs(node):
                for producer in tensor.inputs:
                    j = unit_of[producer.name]
                    if j != i:
                        preds[i].add(j)
    # Kahn's algorithm, ties broken by the position of the unit's first node: deterministic.
    first = [min(order[n.name] for n in nodes) for nodes in raw]
    users: List[List[int]] = [[] for _ in raw]
    waiting = [len(p) for p in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            users[p].append(i)
    ready = [(first[i], i) for i in range(len(raw)) if not waiting[i]]
    heapq.heapify(ready)
    done: List[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        done.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (first[u], u))
    if len(done) != len(raw):  # pragma: no cover - a chain match can never close a cycle on a DAG
        raise MrvlConvertError("internal error: composites form a cycle")
    new_index = {old: new for new, old in enumerate(done)}
    return [Unit(new_index[old], raw[old], comp_of[old], sorted(new_index[p] for p in preds[old]),
                 _heavy(comp_of[old]) and not any(n.name in light for n in raw[old]))
            for old in done]


def _multi(units: Sequence[Unit], mrvl: set, demoted: Dict[str, str],
           minimum: int = 1) -> Dict[int, int]:
    """Each of ``light_regions.PLANS``; the one with fewer Mrvl stages, then fewer stages,
    wins; a tie keeps the earlier (upstream's first)."""
    who = "as upstream decides" if minimum == 1 else f"(min_compute_layers={minimum})"
    plans = []
    for order, choice in enumerate(PLANS):
        kept, why = set(mrvl), {}

        def demote(unit: Unit, what: str, around: str) -> None:
            layers = unit.composite.rule.layer
            place = ("its Mrvl region has" if what == "region" else
                     "it stands alone on Mrvl between CPU ops, with")
            for node in unit.nodes:
                why[node.name] = (f"matched {unit.composite.rule.name} ({layers}), but {place} "
                                  f"{_light_reason(minimum)}, so it stays on CPU {who}{around}")

        stage = settle(units, kept, minimum, choice, demote)
        plans.append(((mrvl_stage_count(stage, kept), len(set(stage.values())), order),
                      kept, why, stage))
    _, kept, why, stage = min(plans, key=lambda plan: plan[0])
    mrvl.intersection_update(kept)
    demoted.update(why)
    return stage


def _keep_largest(units: Sequence[Unit], mrvl: set, demoted: Dict[str, str],
                  stage: Dict[int, int], limit: int, policy: str, rank: Ranking,
                  minimum: int) -> Dict[int, int]:
    """Send the Mrvl regions that weigh least under ``rank`` back to CPU until at most ``limit``
    remain.
    The stages are then recomputed (a region left with too few compute-heavy layers goes to
    CPU too, as in ``_multi``) and counted again."""
    while True:
        regions: Dict[int, List[Unit]] = {}
        for unit in units:
            if unit.index in mrvl:
                regions.setdefault(stage[unit.index], []).append(unit)
        if len(regions) <= limit:
            return stage
        # Heaviest first; an earlier region wins a tie: deterministic.
        ranked = sorted(regions, key=lambda s: (-rank.weight([n for u in regions[s]
                                                              for n in u.nodes]), s))
        for s in ranked[limit:]:
            for unit in regions[s]:
                mrvl.discard(unit.index)
                for node in unit.nodes:
                    demoted[node.name] = (
                        f"matched {unit.composite.rule.name}, but beyond max_subgraphs: its Mrvl "
                        f"region is not among the {limit} with the most {rank.what}")
        if policy == "single":
            return {u.index: (0 if u.index in mrvl else 1) for u in units}
        stage = _multi(units, mrvl, demoted, minimum)


def _single(units: Sequence[Unit], mrvl: set, demoted: Dict[str, str],
            minimum: int = 1) -> Dict[int, int]:
    prefix = set()
    blocker: Dict[int, str] = {}
    for unit in units:
        cpu_preds = [p for p in unit.preds if p not in prefix]
        if unit.index in mrvl and not cpu_preds:
            prefix.add(unit.index)
        elif unit.index in mrvl:
            blocker[unit.index] = units[cpu_preds[0]].nodes[-1].name
    if _too_light((units[i] for i in prefix), minimum):
        for i in prefix:
            blocker[i] = ""
        prefix = set()
    for i in sorted(mrvl - prefix):
        unit = units[i]
        why = (f"it reads from {blocker[i]!r}, which runs on CPU" if blocker.get(i)
               else f"the Mrvl prefix of the model has {_light_reason(minimum)}")
        for node in unit.nodes:
            demoted[node.name] = (f"matched {unit.composite.rule.name}, but policy 'single' allows "
                                  f"one Mrvl subgraph fed only by model inputs and {why}")
    mrvl.intersection_update(prefix)
    return {u.index: (0 if u.index in prefix else 1) for u in units}


def _build_stages(graph: gs.Graph, units: Sequence[Unit], stage_of: Dict[int, int], mrvl: set,
                  model_name: str) -> List[Stage]:
    by_stage: Dict[int, List[Unit]] = {}
    for unit in units:
        by_stage.setdefault(stage_of[unit.index], []).append(unit)
    graph_outputs = {t.name for t in graph.outputs}
    stages: List[Stage] = []
    counters = {"mrvl": 0, "cpu": 0}
    for s in sorted(by_stage):
        members = by_stage[s]
        kind = "mrvl" if members[0].index in mrvl else "cpu"
        name = f"{model_name}_{kind}_{counters[kind]}"
        counters[kind] += 1
        stages.append(Stage(kind, name, members, [], [], getattr(graph, "opset", None)))
    node_stage = {n.name: st for st in stages for n in st.nodes}
    owners = nested_owners(graph)
    for stage in stages:
        inside = {n.name for n in stage.nodes}
        seen_in, seen_out = set(), set()
        for node in stage.nodes:
            for tensor in all_inputs(node):
                if isinstance(tensor, gs.Constant) or not tensor.name or tensor.name in seen_in:
                    continue
                if not tensor.inputs or tensor.inputs[0].name not in inside:
                    stage.inputs.append(tensor)
                    seen_in.add(tensor.name)
            for tensor in node.outputs:
                if not tensor.name or tensor.name in seen_out:
                    continue
                outside = [c for c in tensor.outputs
                           if node_stage[owners.get(id(c), c).name] is not stage]
                if outside or tensor.name in graph_outputs:
                    stage.outputs.append(tensor)
                    seen_out.add(tensor.name)
    return stages
