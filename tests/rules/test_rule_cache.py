"""The built-in rule files are parsed once per process and content, read once per process and
stamp (mtime, size, inode: an edited file is read again); user rule files every time. What
every conversion derives from its rules (``float_forms``, a rule's ``ops``) is derived once per
set of rule objects."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mrvl_convert.options import ConvertOptions
from mrvl_convert.rules import loader
from mrvl_convert.rules.float_spans import float_forms
from mrvl_convert.rules.int8_forms import int8_op_types
from mrvl_convert.rules.loader import builtin_digests, builtin_paths, load_rules

USER_RULES = """format_version: 1
composites:
  - name: user.relu
    layer: Relu
    pattern:
      - {role: relu, op: [Relu]}
"""


def _counting(monkeypatch, function: str) -> list:
    """The labels ``loader.<function>(text_or_path, label)`` is called with from now on."""
    seen = []
    real = getattr(loader, function)

    def counting(first, label):
        seen.append(label)
        return real(first, label)

    monkeypatch.setattr(loader, function, counting)
    return seen


@pytest.fixture
def parses(monkeypatch):
    """The labels of every document parse_bounded_yaml reads from now on."""
    return _counting(monkeypatch, "parse_bounded_yaml")


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


def test_a_second_load_reads_no_builtin_file(monkeypatch):
    first = load_rules()
    reads = _counting(monkeypatch, "_read_text")
    assert load_rules() == first
    assert load_rules(layer_set="upstream-0.19")  # builtin.yaml, read for marvell already
    ConvertOptions().manifest_entry({})  # the manifest's rule digests
    assert reads == []


def test_the_manifest_digests_are_the_files_bytes():
    for path, digest in builtin_digests():
        assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [p for p, _ in builtin_digests()] == builtin_paths()
    entry = ConvertOptions().manifest_entry({})
    assert [s["sha256"] for s in entry["rules"]] == [d for _, d in builtin_digests()]


def test_an_edited_file_is_read_again(tmp_path: Path):
    path = tmp_path / "rules.yaml"
    path.write_text("format_version: 1\n", encoding="utf-8")
    text, digest = loader._builtin_file(str(path), loader._stamp(path))
    assert text == "format_version: 1\n"
    path.write_text("format_version: 1\ncomposites: []\n", encoding="utf-8")
    text, digest2 = loader._builtin_file(str(path), loader._stamp(path))
    assert text.endswith("composites: []\n")
    assert digest2 == hashlib.sha256(path.read_bytes()).hexdigest() != digest


def test_a_folder_listing_follows_its_files(tmp_path: Path):
    (tmp_path / "b.yaml").write_text("x", encoding="utf-8")
    assert loader._yaml_files(str(tmp_path), loader._stamp(tmp_path)) == (tmp_path / "b.yaml",)
    (tmp_path / "a.yaml").write_text("x", encoding="utf-8")
    (tmp_path / "c.txt").write_text("x", encoding="utf-8")
    assert loader._yaml_files(str(tmp_path), loader._stamp(tmp_path)) == (
        tmp_path / "a.yaml", tmp_path / "b.yaml")
    assert loader._yaml_files(str(tmp_path / "gone"), loader._stamp(tmp_path / "gone")) == ()


def test_the_same_rules_give_the_one_float_forms(tmp_path: Path) -> None:
    first = float_forms(load_rules())
    assert float_forms(load_rules()) is first  # a new list of the same rule objects
    assert first.int8_ops == int8_op_types(load_rules())
    path = tmp_path / "user.yaml"
    path.write_text(USER_RULES, encoding="utf-8")
    assert float_forms(load_rules(path)) is not first  # other rules get their own


def test_a_rules_ops_are_its_steps_ops() -> None:
    for rule in load_rules():
        assert rule.ops == tuple(op for step in rule.steps for op in step.ops)
        assert rule.ops is rule.ops  # made once
