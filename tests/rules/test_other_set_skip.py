"""``rules/other_sets.layer_set_hints`` skips the other set's match when none of its rules has
an op type of a node left on CPU (no composite of it could hold one): the hints are those of
the full match, for both layer sets, on models whose left nodes the other set takes and does
not take."""
from __future__ import annotations

from typing import Dict

import onnx_graphsurgeon as gs
import pytest

from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from mrvl_convert.layers import MARVELL, UPSTREAM
from mrvl_convert.rules.loader import LAYER_SETS, load_rules
from mrvl_convert.rules.matcher import match
from mrvl_convert.rules.other_sets import NOT_MAPPED, layer_set_hints
from support.models import Builder, conv_then_cpu_tail
from support.recurrent import crnn


def _full_match_hints(graph: gs.Graph, layer_set: str, plan, deny) -> Dict[str, str]:
    """The hints as computed before the skip: the other set always matched."""
    hints: Dict[str, str] = {}
    left = {n.name for n in graph.nodes if n.name not in plan.owner and n.name not in deny}
    if not left:
        return hints
    for other in LAYER_SETS:
        if other == layer_set:
            continue
        elsewhere = match(graph, load_rules(layer_set=other), deny=deny)
        for name, index in elsewhere.owner.items():
            if name in left and name not in hints:
                hints[name] = f"layer set {other} would take it " \
                              f"({elsewhere.composites[index].rule.name})"
    for node in graph.nodes:
        if node.name in left and node.name not in hints and node.op in NOT_MAPPED:
            hints[node.name] = NOT_MAPPED[node.op]
    return hints


def _sigmoid_mul_argmax():
    b = Builder()
    y = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    s = b.op("Sigmoid", [y], name="sig")
    m = b.op("Mul", [y, s], name="mul")
    return b.model([b.op("ArgMax", [m], name="argmax", axis=1, keepdims=1)])


@pytest.mark.parametrize("layer_set", [MARVELL, UPSTREAM])
@pytest.mark.parametrize("build", [conv_then_cpu_tail, _sigmoid_mul_argmax,
                                   lambda: crnn(steps=4, hidden=4)])
def test_hints_are_those_of_the_full_match(build, layer_set):
    graph = canonicalize(load_model(build())).graph
    rules = load_rules(layer_set=layer_set)
    for deny in ({}, {graph.nodes[0].name: "denied"}):
        plan = match(graph, rules, deny=deny)
        assert layer_set_hints(graph, layer_set, plan, deny) == \
            _full_match_hints(graph, layer_set, plan, deny)
