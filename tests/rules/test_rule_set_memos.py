"""What every conversion derives from its rule set is derived once per set of rule objects:
``float_forms`` (the int8 op types and float composites the foreign-int8 pass reads) and each
rule's ``ops``; other rules (a user's file) get their own."""
from __future__ import annotations

from pathlib import Path

from mrvl_convert.rules.float_spans import float_forms
from mrvl_convert.rules.int8_forms import int8_op_types
from mrvl_convert.rules.loader import load_rules

USER_RULES = """format_version: 1
composites:
  - name: user.int8_relu
    layer: Relu
    pattern:
      - {role: in_dq, op: [DequantizeLinear]}
      - {role: relu, op: [Relu]}
"""


def test_the_same_rules_give_the_one_result() -> None:
    first = float_forms(load_rules())
    assert float_forms(load_rules()) is first  # a new list of the same rule objects
    assert first.int8_ops == int8_op_types(load_rules())


def test_other_rules_get_their_own(tmp_path: Path) -> None:
    path = tmp_path / "user.yaml"
    path.write_text(USER_RULES, encoding="utf-8")
    builtin, user = float_forms(load_rules()), float_forms(load_rules(path))
    assert user is not builtin
    assert user.int8_ops == int8_op_types(load_rules(path))


def test_a_rules_ops_are_its_steps_ops() -> None:
    for rule in load_rules():
        assert rule.ops == tuple(op for step in rule.steps for op in step.ops)
        assert rule.ops is rule.ops  # made once
