"""Readers refuse mutated files with the library's error, and the error names the field.

- rule files (YAML, schemas/rules.schema.json) -> ``RuleFileError``
- Nodes-JSON / Constants-JSON pairs read by the simulator -> ``ArtifactError``
"""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any, List, Tuple

import pytest
import yaml
from hypothesis import assume, given, note
from hypothesis import strategies as st

from mrvl_convert.errors import MrvlConvertError, RuleFileError
from mrvl_convert.rules.loader import builtin_path, load_rule_file
from mrvl_convert.rules.model import LAYER_ROLES

# ============================================================================ rule files

BUILTIN = yaml.safe_load(builtin_path().read_text(encoding="utf-8"))
COMPOSITE_KEYS = ["name", "layer", "priority", "summary", "pattern", "constraints"]
REQUIRED_COMPOSITE_KEYS = ["name", "layer", "pattern"]

# Values that are of the wrong JSON type (or out of range / not matching the pattern) per field.
BAD_VALUES = {
    "name": [1, None, ["mrvl.x"], "1starts-with-digit", "has space", ""],
    "layer": [1, None, "Conv3D", "conv2d", ["Conv2D"]],
    "priority": ["100", 1.5, -1, 1001, None, True],
    "summary": [1, None, ["x"], {"a": 1}],
    "pattern": [[], "Conv", {"role": "conv"}, None, [{"role": "conv", "op": ["Conv"]}] * 9],
    "constraints": ["x", {"role": "conv"}, None, 3],
    "step.role": [1, None, "Conv", "bad-role", "", ["conv"]],
    "step.op": [[], "Conv", [1], ["bad op"], ["1Conv"], None],
    "step.optional": ["yes", 1, None, [True]],
    "constraint.role": [1, None, ["conv"]],
    "constraint.check": ["no_such_check", 1, None, "Float32"],
    "constraint.args": [[1], "rank", 4, None],
    "constraint.reason": ["", 1, None, ["why"]],
}
NO_VALUE = object()


def _field(*parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


@st.composite
def rule_mutations(draw) -> Tuple[Any, List[str], str]:
    """(mutated rule-file data, strings the error message must contain, what was done)."""
    data = copy.deepcopy(BUILTIN)
    comps = data["composites"]
    i = draw(st.integers(0, len(comps) - 1), label="composite")
    comp = comps[i]
    kind = draw(st.sampled_from([
        "drop_key", "bad_value", "unknown_key", "step_drop", "step_bad", "step_unknown",
        "constraint_drop", "constraint_bad", "constraint_unknown", "constraint_role",
        "dup_role", "all_optional", "wrong_layer", "dup_name", "top_level"]), label="mutation")
    if kind == "drop_key":
        key = draw(st.sampled_from(REQUIRED_COMPOSITE_KEYS))
        del comp[key]
        return data, [_field("composites", i), repr(key)], f"composites[{i}] without {key}"
    if kind == "bad_value":
        key = draw(st.sampled_from(COMPOSITE_KEYS))
        comp[key] = draw(st.sampled_from(BAD_VALUES[key]))
        return data, [_field("composites", i, key)], f"composites[{i}].{key} = {comp[key]!r}"
    if kind == "unknown_key":
        key = draw(st.sampled_from(["op", "Name", "patterns", "constraint", "extra"]))
        comp[key] = 1
        return data, [_field("composites", i), repr(key)], f"composites[{i}] gains {key}"
    if kind.startswith("step"):
        j = draw(st.integers(0, len(comp["pattern"]) - 1), label="step")
        step = comp["pattern"][j]
        where = _field("composites", i, "pattern", j)
        if kind == "step_drop":
            key = draw(st.sampled_from(["role", "op"]))
            del step[key]
            return data, [where, repr(key)], f"{where} without {key}"
        if kind == "step_bad":
            key = draw(st.sampled_from(["role", "op", "optional"]))
            step[key] = draw(st.sampled_from(BAD_VALUES[f"step.{key}"]))
            return data, [f"{where}.{key}"], f"{where}.{key} = {step[key]!r}"
        step["kind"] = "x"
        return data, [where, "'kind'"], f"{where} gains kind"
    if kind.startswith("constraint"):
        cons = comp.get("constraints") or []
        assume(cons)
        k = draw(st.integers(0, len(cons) - 1), label="constraint")
        con = cons[k]
        where = _field("composites", i, "constraints", k)
        if kind == "constraint_drop":
            key = draw(st.sampled_from(["role", "check", "reason"]))
            del con[key]
            return data, [where, repr(key)], f"{where} without {key}"
        if kind == "constraint_bad":
            key = draw(st.sampled_from(["role", "check", "args", "reason"]))
            con[key] = draw(st.sampled_from(BAD_VALUES[f"constraint.{key}"]))
            return data, [f"{where}.{key}"], f"{where}.{key} = {con[key]!r}"
        if kind == "constraint_unknown":
            con["when"] = "always"
            return data, [where, "'when'"], f"{where} gains when"
        con["role"] = "no_such_role"
        return data, [f"{where}.role", "no_such_role"], f"{where}.role = no_such_role"
    if kind == "dup_role":
        assume(len(comp["pattern"]) >= 2)
        comp["pattern"][1]["role"] = comp["pattern"][0]["role"]
        return data, [_field("composites", i, "pattern")], f"composites[{i}]: duplicate role"
    if kind == "all_optional":
        for step in comp["pattern"]:
            step["optional"] = True
        return data, [_field("composites", i, "pattern")], f"composites[{i}]: all steps optional"
    if kind == "wrong_layer":
        roles = {s["role"] for s in comp["pattern"]}
        bad = [layer for layer, (req, opt) in sorted(LAYER_ROLES.items())
               if not req <= roles or not roles <= req | opt]
        comp["layer"] = draw(st.sampled_from(bad))
        return data, [_field("composites", i, "pattern"), comp["layer"]], \
            f"composites[{i}].layer = {comp['layer']}"
    if kind == "dup_name":
        j = draw(st.integers(0, len(comps) - 1).filter(lambda j: j != i), label="other")
        comps[j]["name"] = comp["name"]
        return data, [repr(comp["name"])], f"composites[{j}].name = composites[{i}].name"
    # top level
    what = draw(st.sampled_from(["version", "version_str", "no_composites", "empty", "dict",
                                 "unknown", "list", "scalar"]))
    if what == "version":
        data["format_version"] = 2
        return data, ["format_version"], "format_version 2"
    if what == "version_str":
        data["format_version"] = "1"
        return data, ["format_version"], "format_version '1'"
    if what == "no_composites":
        del data["composites"]
        return data, ["'composites'"], "no composites"
    if what == "empty":
        data["composites"] = []
        return data, ["composites"], "composites []"
    if what == "dict":
        data["composites"] = {"a": comp}
        return data, ["composites"], "composites is a mapping"
    if what == "unknown":
        data["rules"] = []
        return data, ["'rules'"], "unknown top-level key"
    if what == "list":
        return [data], ["<top level>"], "top level is a list"
    return "just a string", ["<top level>"], "top level is a string"


def _write(tmp: str, name: str, text: str) -> Path:
    path = Path(tmp) / name
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_rule_file_loads():
    assert load_rule_file(builtin_path())


@given(mutation=rule_mutations())
def test_mutated_rule_file_is_refused_naming_the_field(mutation):
    data, must_name, what = mutation
    note(what)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "rules.yaml", yaml.safe_dump(data, sort_keys=False))
        with pytest.raises(RuleFileError) as info:
            load_rule_file(path)
    msg = str(info.value)
    note(msg)
    for s in must_name:
        assert s in msg, f"{what}: error {msg!r} does not name {s!r}"


@given(text=st.one_of(
    st.text(max_size=200),
    st.sampled_from(["composites: [", "{format_version: 1, composites: [{name: a", "\t- x",
                     "a: b: c", "!!python/object:os.system x", "--- 1\n--- 2\n", "\x00"]),
    st.binary(max_size=100).map(lambda b: b.decode("latin-1"))))
def test_garbage_rule_file_is_refused(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        with pytest.raises(RuleFileError):
            load_rule_file(path)


@given(cut=st.integers(1, 2000))
def test_truncated_builtin_is_refused_or_loads(cut):
    """A truncated builtin.yaml either still parses to a valid file or is a RuleFileError."""
    text = builtin_path().read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "rules.yaml", text[:cut])
        try:
            load_rule_file(path)
        except RuleFileError:
            pass
