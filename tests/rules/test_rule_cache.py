"""The built-in rule files are parsed once per process and content; user rule files every time."""
from __future__ import annotations

from pathlib import Path

import pytest

from mrvl_convert.rules import loader
from mrvl_convert.rules.loader import load_rules

USER_RULES = """format_version: 1
composites:
  - name: user.relu
    layer: Relu
    pattern:
      - {role: relu, op: [Relu]}
"""


@pytest.fixture
def parses(monkeypatch):
    """The labels of every document parse_bounded_yaml reads from now on."""
    seen = []
    real = loader.parse_bounded_yaml

    def counting(text, label):
        seen.append(label)
        return real(text, label)

    monkeypatch.setattr(loader, "parse_bounded_yaml", counting)
    return seen


@pytest.mark.parametrize("layer_set", ["marvell", "upstream-0.19"])
def test_builtin_rules_are_parsed_once_and_served_equal(parses, layer_set):
    loader._parsed_builtins.cache_clear()
    first = load_rules(layer_set=layer_set)
    assert sorted(parses) == sorted(str(p) for p in loader.builtin_paths(layer_set))
    assert load_rules(layer_set=layer_set) == first
    assert len(parses) == len(loader.builtin_paths(layer_set))  # the second call parsed none


def test_a_user_rule_file_is_read_every_time(parses, tmp_path: Path):
    path = tmp_path / "user.yaml"
    path.write_text(USER_RULES, encoding="utf-8")
    load_rules(path)
    path.write_text(USER_RULES.replace("user.relu", "user.relu2"), encoding="utf-8")
    names = [r.name for r in load_rules(path)]
    assert parses.count(str(path)) == 2
    assert "user.relu2" in names and "user.relu" not in names


def test_an_edited_builtin_text_is_parsed_again(parses):
    texts = loader._builtin_texts("marvell")
    edited = ((texts[0][0], texts[0][1] + "\n# edited\n"),) + texts[1:]
    generic, rules = loader._parsed_builtins(edited)
    assert len(parses) == len(texts)
    assert [r.name for r in rules] == [r.name for r in loader._parsed_builtins(texts)[1]]
