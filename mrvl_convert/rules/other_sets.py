"""Which other built-in layer set would take a node that the chosen one leaves on CPU.

The two sets differ both ways: upstream TVM v0.19's composites keep on CPU what the newer
Marvell codegen runs (a Sigmoid, a Mul of two activations, a Clip...), and the newer set has
limits upstream's rule lacks (its Concat takes 4-D batch-1 tensors only, upstream's a 2-D one
too). The report says so, per node: the graph is matched once more with the other set's
built-in rules, and a node only that match claims gets the hint "layer set marvell would take it
(mrvl.sigmoid)", whether the chosen set has no rule for its op type or a rule that refused it on
a constraint. A node of an op the newer codegen has a layer for but no set here maps (ArgMax,
TopK), or that no set has a layer for by design (Gather by int64 indices), gets why instead.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Dict, Mapping, Optional, Sequence

import onnx_graphsurgeon as gs

from mrvl_convert.ir.match import Composite, Rule
from mrvl_convert.layers import CATALOGUE
from mrvl_convert.rules.loader import LAYER_SETS, builtin_paths, load_rules
from mrvl_convert.rules.matcher import MatchPlan, bindings, evaluate, match

_INDICES = ("ONNX's int64 indices have no carrier in the artifact (the simulator and Nodes-JSON "
            "hold float32 and int8 tensors; the codegen takes Relay's int32 indices and writes "
            "no axis for a 4-D input)")
# Op type -> why the newer codegen's layer for it is not used (princekumar70/tvm@9446d803
# codegen.cc CreateCompositeMrvlTopKArgmaxLayer).
NOT_MAPPED: Mapping[str, str] = MappingProxyType({
    "ArgMax": f"the newer codegen's mrvl.argmax (Argmax) is not mapped: {_INDICES}",
    "TopK": f"the newer codegen's mrvl.topk (TopK) is not mapped: {_INDICES}",
    # An embedding lookup by token ids: int64 work at the model's edge, so the CPU stage that
    # runs it comes before the accelerator's and cuts nothing in the middle.
    "Gather": ("neither codegen has a layer that gathers by index, and ONNX's int64 indices "
               "have no carrier in the artifact: an embedding lookup by token ids runs on CPU, "
               "before the accelerator stage"),
    # jax.nn.one_hot as jax2tf writes it: Equal(ids, range) then Cast, int work at the edge.
    "Equal": ("no layer compares: a one-hot of integer ids (Equal against a constant range, "
              "then Cast) runs on CPU before the accelerator stage, as an embedding lookup does"),
})


def layer_set_hints(graph: gs.Graph, layer_set: str, plan: MatchPlan,
                    deny: Mapping[str, str]) -> Dict[str, str]:
    """Node name -> "layer set <other> would take it (<rule>)", for every node that no composite
    of ``plan`` (made with ``layer_set``) takes and the user did not deny."""
    hints: Dict[str, str] = {}
    left = {n.name for n in graph.nodes if n.name not in plan.owner and n.name not in deny}
    if not left:
        return hints  # nothing to explain: spare the second match
    left_ops = {n.op for n in graph.nodes if n.name in left}
    for other in LAYER_SETS:
        if other == layer_set:
            continue
        rules = load_rules(layer_set=other)
        if not left_ops & {op for rule in rules for op in rule.ops + rule.absorb}:
            continue  # no composite of its can hold a node left here: spare the match
        elsewhere = match(graph, rules, deny=deny)
        for name, index in elsewhere.owner.items():
            if name in left and name not in hints:
                rule = elsewhere.composites[index].rule.name
                hints[name] = f"layer set {other} would take it ({rule})"
    for node in graph.nodes:
        if node.name in left and node.name not in hints and node.op in NOT_MAPPED:
            hints[node.name] = NOT_MAPPED[node.op]
    return hints


def set_verdicts(graph: gs.Graph, composites: Sequence[Composite], layer_set: str,
                 converted_with: Sequence[Rule] = ()) -> Dict[str, Optional[str]]:
    """Node name -> None where ``layer_set``'s built-in rules accept the composite that holds the
    node as it stands (a rule of the same layer kind binds the same chain and every constraint
    of it holds, the generic ones included), else why not: the check the manifest's ``codegen``
    uses, so a layer is reported as needing only v0.19 if and only if ``--layer-set
    upstream-0.19``'s rules accept its composite. ``converted_with``: the conversion's rules;
    the user's among them (from a rule file, not built in) whose layer kind ``layer_set`` has
    apply too, as they would under ``--layer-set layer_set --rules ...``. Requires the graph as
    matched (before partition and lowering touch it)."""
    builtin = {str(p) for p in builtin_paths()} | {"builtin"}
    user = [r for r in converted_with if r.source not in builtin
            and layer_set in CATALOGUE[r.layer].layer_sets]
    names = {r.name for r in user}
    rules = [r for r in load_rules(layer_set=layer_set) if r.name not in names] + user
    outputs = {t.name for t in graph.outputs}
    verdicts: Dict[str, Optional[str]] = {}
    for composite in composites:
        verdict = _verdict(graph, composite, rules, outputs, layer_set)
        for node in composite.nodes:
            verdicts[node.name] = verdict
    return verdicts


def _verdict(graph: gs.Graph, composite: Composite, rules: Sequence[Rule], outputs: set,
             layer_set: str) -> Optional[str]:
    # Absorbed producers (role "operand": an int8 rule's weight DequantizeLinear) are not part of
    # the chain a rule's pattern walks.
    chain = [node for role, node in composite.binding.roles if role != "operand"]
    names = [node.name for node in chain]
    layer = composite.rule.layer
    reason: Optional[str] = None
    for rule in sorted((r for r in rules if r.layer == layer), key=lambda r: (-r.priority, r.name)):
        for binding in bindings(rule, chain[0], {}, outputs):
            if [node.name for node in binding.nodes] != names:
                continue
            result = evaluate(rule, binding, graph)
            if result.ok:
                return None
            reason = reason or f"{rule.name}: {result.reason}"
    if reason is None:
        ops = "+".join(node.op for node in chain)
        reason = f"no rule of layer set {layer_set} makes {layer} of {ops}"
    return reason
