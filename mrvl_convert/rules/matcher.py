"""Stage 3, match: which chains of the canonical graph become which Marvell composites.

Requires: a topologically sorted graphsurgeon graph and a list of rules.
Ensures: a ``MatchPlan`` in which every node is claimed by at most one composite, each composite
is a chain whose inner tensors have exactly one consumer and are not graph outputs, and every
node that no rule took keeps the best near-miss (the failing match that got furthest, with the
reason of the constraint that failed) or the reason that no rule handles its op.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import onnx_graphsurgeon as gs

from mrvl_convert.rules.checks import CHECKS
from mrvl_convert.ir.match import Binding, Composite, MatchPlan, MatchResult, Rule


class _Details(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def evaluate(rule: Rule, binding: Binding, graph: gs.Graph) -> MatchResult:
    """Check every constraint of ``rule`` on ``binding``; the first failure is the result."""
    for constraint in rule.constraints:
        node = binding.node(constraint.role)
        if node is None:
            continue  # an optional step that is not in this match
        details = CHECKS[constraint.check](node, constraint.args, graph)
        if details is not None:
            reason = constraint.reason.format_map(_Details({"op": node.op, **details}))
            return MatchResult.fail(binding, reason, (node.name,))
    return MatchResult.success(binding)


def _chain_next(node: gs.Node, graph_outputs: set) -> Optional[gs.Node]:
    out = node.outputs[0]
    if out.name in graph_outputs or any(t.outputs or t.name in graph_outputs
                                         for t in node.outputs[1:]):
        return None
    consumers = out.outputs
    return consumers[0] if len(consumers) == 1 else None


def bindings(rule: Rule, start: gs.Node, claimed: Dict[str, int],
             graph_outputs: set) -> Iterator[Binding]:
    """Every way the rule's chain can lie on the graph with ``start`` as its first node."""
    steps = rule.steps

    def walk(i: int, cur: Optional[gs.Node], acc: Tuple) -> Iterator[Binding]:
        if i == len(steps):
            if acc:
                yield Binding(rule, acc)
            return
        step = steps[i]
        if cur is not None and cur.op in step.ops and cur.name not in claimed:
            nxt = _chain_next(cur, graph_outputs) if i + 1 < len(steps) else None
            yield from walk(i + 1, nxt, acc + ((step.role, cur),))
        if step.optional:
            yield from walk(i + 1, cur, acc)

    yield from walk(0, start, ())


def _absorb(binding: Binding, claimed: Dict[str, int], graph_outputs: set) -> Binding:
    """The binding with the producers its rule absorbs (role ``operand``): nodes of the rule's
    ``absorb`` op types, not yet claimed, whose every output feeds the chain only."""
    ops = binding.rule.absorb
    if not ops:
        return binding
    inside = {n.name for n in binding.nodes}
    extra: List[gs.Node] = []
    for node in binding.nodes:
        for tensor in node.inputs:
            for source in tensor.inputs:
                if (source.op in ops and source.name not in inside
                        and source.name not in claimed
                        and all(t.name not in graph_outputs and t.outputs
                                and all(c.name in inside for c in t.outputs)
                                for t in source.outputs)):
                    extra.append(source)
                    inside.add(source.name)
    if not extra:
        return binding
    return Binding(binding.rule, tuple(("operand", n) for n in extra) + binding.roles)


DENIED = "denied by the user"


def _start_ops(rule: Rule) -> Tuple[str, ...]:
    """The op types a chain of ``rule`` can start at: those of its steps up to and including
    the first required one (every step's when all are optional). ``bindings`` yields nothing
    for a node of any other op type."""
    ops: List[str] = []
    for step in rule.steps:
        ops.extend(step.ops)
        if not step.optional:
            break
    return tuple(ops)


def _by_start_op(ordered: Sequence[Rule]) -> Dict[str, List[Tuple[int, Rule]]]:
    """op type -> the (rank, rule) pairs that can start at it, in rank order: matching a node
    tries only these, not every rule (the same bindings, in the same order)."""
    index: Dict[str, List[Tuple[int, Rule]]] = {}
    for rank, rule in enumerate(ordered):
        for op in dict.fromkeys(_start_ops(rule)):
            index.setdefault(op, []).append((rank, rule))
    return index


def match(graph: gs.Graph, rules: Sequence[Rule], *,
          deny: Mapping[str, str] = MappingProxyType({})) -> MatchPlan:
    """``deny``: node name -> the user's entry that names it; no composite takes such a node
    (the rest of the chain it would have been fused into may still match without it)."""
    ordered = sorted(rules, key=lambda r: (-r.priority, r.name))
    candidates = _by_start_op(ordered)
    graph_outputs = {t.name for t in graph.outputs}
    # Claimed by no composite (-1): bindings() walks around them like around taken nodes.
    claimed: Dict[str, int] = {name: -1 for name in deny}
    composites: List[Composite] = []
    near: Dict[str, Tuple[tuple, MatchResult]] = {}
    for node in graph.nodes:
        if node.name in claimed:
            continue
        best: Optional[Tuple[Tuple[int, int], Binding]] = None
        for rank, rule in candidates.get(node.op, ()):
            for binding in bindings(rule, node, claimed, graph_outputs):
                result = evaluate(rule, binding, graph)
                if result.ok:
                    key = (rule.priority, len(binding.nodes))
                    if best is None or key > best[0]:
                        best = (key, binding)
                    continue
                for bound in binding.nodes:
                    # The most telling miss for a node is a rule about that very node.
                    score = (bound is binding.anchor, bound.name in result.failed_nodes,
                             len(binding.nodes), -rank)
                    if bound.name not in near or score > near[bound.name][0]:
                        near[bound.name] = (score, result)
        if best is not None:
            binding = _absorb(best[1], claimed, graph_outputs)
            composites.append(Composite(binding.rule, binding))
            for bound in binding.nodes:
                claimed[bound.name] = len(composites) - 1
    owner = {k: v for k, v in claimed.items() if v >= 0}
    plan = MatchPlan(composites, owner, {k: v[1] for k, v in near.items()})
    for name, entry in deny.items():
        plan.near_miss.pop(name, None)
        plan.unmatched_reason[name] = f"{DENIED} ({entry!r})"
    for node in graph.nodes:
        if node.name not in claimed and node.name not in plan.near_miss:
            plan.unmatched_reason[node.name] = _why_unmatched(node, ordered)
    return plan


# Recurrent cells, onnx's and onnxruntime's contrib int8 one: no layer of the set computes them.
_RECURRENT = ("LSTM", "GRU", "RNN", "DynamicQuantizeLSTM")
_UNROLLED = ("LSTM", "GRU", "RNN")


def _why_unmatched(node: gs.Node, rules: Sequence[Rule]) -> str:
    fusing = sorted({r.name for r in rules if node.op in r.ops})
    if not fusing and node.op in _RECURRENT:
        # LSTM/GRU/RNN over a static sequence are unrolled (frontend/recurrent_unroll.py).
        unrolled = ("; one over a static sequence is unrolled into FC and gate layers, this "
                    "one was not (its 'canonical' entry says why)" if node.op in _UNROLLED
                    else "")
        return (f"no rule handles op type {node.op}: a recurrent cell, which no layer of the "
                f"accelerator's set computes{unrolled}; it runs on the CPU and the layers "
                f"around it stay on the accelerator")
    if not fusing:
        return f"no rule handles op type {node.op}"
    producers = [t.inputs[0] for t in node.inputs if t.inputs]
    after = (f"; here it follows {producers[0].op} node {producers[0].name!r}" if producers
             else "; here it reads a graph input")
    return (f"{node.op} goes to the accelerator only fused into a composite "
            f"({', '.join(fusing)}) that does not start at it{after}")
