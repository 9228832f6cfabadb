"""rules/matcher.py tries at a node only the rules whose chain can start at its op type (the
steps up to the first required one): every other rule's ``bindings`` is empty there, and trying
each rule at each node was most of matching an unrolled cell's thousands of nodes."""
from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.ir.match import Rule, Step
from mrvl_convert.rules import matcher
from mrvl_convert.rules.loader import load_rules
from support.recurrent import crnn


def test_only_rules_that_can_start_at_a_node_are_tried(monkeypatch) -> None:
    tried = []
    real = matcher.bindings

    def counting(rule, start, claimed, outputs):
        tried.append((rule, start.op))
        return real(rule, start, claimed, outputs)

    monkeypatch.setattr(matcher, "bindings", counting)
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(crnn(steps=4)))
    rules = load_rules()
    plan = matcher.match(graph, rules)
    assert plan.composites and tried
    assert all(op in matcher._start_ops(rule) for rule, op in tried)


def test_start_ops_run_through_the_optional_steps() -> None:
    rule = Rule("r", "FC", (Step("pad", ("Pad",), optional=True), Step("main", ("Conv",)),
                            Step("act", ("Relu",))), ())
    assert matcher._start_ops(rule) == ("Pad", "Conv")
    optional = Rule("o", "FC", (Step("a", ("Relu",), optional=True),
                                Step("b", ("Clip",), optional=True)), ())
    assert matcher._start_ops(optional) == ("Relu", "Clip")
