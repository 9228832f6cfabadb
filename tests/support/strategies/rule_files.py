"""Hypothesis strategies of rule files: mutations of the built-in rule file that the loader must
refuse naming the field (``rule_mutations``: against rules.schema.json; ``rule_semantic_mutations``:
schema-valid but unusable constraint args or reason templates), and valid user rule files
overriding built-in composites (``rule_overrides``)."""
from __future__ import annotations

import copy
import json
from typing import Any, List, Tuple

import yaml
from hypothesis import assume
from hypothesis import strategies as st

from mrvl_convert.layers import CATALOGUE
from mrvl_convert.rules.loader import builtin_path
from support.strategies.mutation import Mutation

BUILTIN = yaml.safe_load(builtin_path().read_text(encoding="utf-8"))
COMPOSITE_KEYS = ["name", "layer", "priority", "summary", "pattern", "constraints"]
REQUIRED_COMPOSITE_KEYS = ["name", "layer", "pattern"]

# Values that are of the wrong JSON type (or out of range / not matching the pattern) per field.
BAD_VALUES = {
    "name": [1, None, ["mrvl.x"], "1starts-with-digit", "has space", ""],
    "layer": [1, None, "Conv3D", "conv2d", ["Conv2D"]],
    "priority": ["100", 1.5, -1, 1001, None, True],
    "summary": [1, None, ["x"], {"a": 1}],
    "pattern": [[], "Conv", {"role": "conv"}, None, [{"role": "conv", "op": ["Conv"]}] * 10],
    "constraints": ["x", {"role": "conv"}, None, 3],
    "step.role": [1, None, "Conv", "bad-role", "", ["conv"]],
    "step.op": [[], "Conv", [1], ["bad op"], ["1Conv"], None],
    "step.optional": ["yes", 1, None, [True]],
    "constraint.role": [1, None, ["conv"]],
    "constraint.check": ["no_such_check", 1, None, "Float32"],
    "constraint.args": [[1], "rank", 4, None],
    "constraint.reason": ["", 1, None, ["why"]],
}


def _field(*parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def rule_mutations():
    return _rule_mutations().map(Mutation)


@st.composite
def _rule_mutations(draw) -> Tuple[Any, List[str], str]:
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
        bad = [name for name, kind in sorted(CATALOGUE.items())
               if not kind.required_roles <= roles
               or not roles <= kind.required_roles | kind.optional_roles | kind.one_of_roles
               or kind.one_of_roles and not kind.one_of_roles & roles]
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


# Arguments each check reads (mrvl_convert/rules/checks.py) and their JSON types.
CHECK_ARGS = {"rank": {"rank": int}, "batch_at_most": {"max": int},
              "const_input": {"index": int}, "attr_in": {"name": str, "values": list}}
WRONG_TYPED = {int: ["four", [4], None, 4.5], str: [1, ["group"], None], list: [0, "0", None]}
BAD_REASONS = ["unbalanced {", "stray } brace", "{0} is positional", "{rank.real.x} attribute",
               "{tensor[0][1]} index", "{detail!z} conversion", "{detail:>>>} spec"]


def rule_semantic_mutations():
    return _rule_semantic_mutations().map(Mutation)


@st.composite
def _rule_semantic_mutations(draw) -> Tuple[Any, List[str], str]:
    """Rule files that pass rules.schema.json but whose constraint args or reason template
    cannot work: the loader must refuse them (RuleFileError naming the field), instead of
    convert() failing later with a KeyError/TypeError/ValueError from inside a check."""
    data = copy.deepcopy(BUILTIN)
    spots = [(i, k, c) for i, comp in enumerate(data["composites"])
             for k, c in enumerate(comp.get("constraints", []))]
    what = draw(st.sampled_from(["drop_arg", "wrong_type", "no_args", "reason"]))
    if what == "reason":
        i, k, con = draw(st.sampled_from(spots))
        con["reason"] = draw(st.sampled_from(BAD_REASONS))
        return data, [_field("composites", i, "constraints", k, "reason")], \
            f"composites[{i}].constraints[{k}].reason = {con['reason']!r}"
    i, k, con = draw(st.sampled_from([s for s in spots if s[2]["check"] in CHECK_ARGS]))
    spec = CHECK_ARGS[con["check"]]
    where = _field("composites", i, "constraints", k, "args")
    if what == "no_args":
        con.pop("args", None)
        return data, [_field("composites", i, "constraints", k)], f"{where} removed"
    key = draw(st.sampled_from(sorted(spec)))
    if what == "drop_arg":
        del con["args"][key]
        return data, [where, key], f"{where}.{key} removed"
    con["args"][key] = draw(st.sampled_from(WRONG_TYPED[spec[key]]))
    return data, [where, key], f"{where}.{key} = {con['args'][key]!r}"


_BUILTIN_RULES = yaml.safe_load(builtin_path().read_text(encoding="utf-8"))


@st.composite
def rule_overrides(draw):
    """A valid user rule file overriding some built-in composites (same name): optional steps
    dropped (so fewer nodes fuse and partitions fragment), priorities changed."""
    comps = _BUILTIN_RULES["composites"]
    chosen = draw(st.lists(st.integers(0, len(comps) - 1), min_size=1, max_size=4, unique=True),
                  label="overridden composites")
    out = []
    for i in sorted(chosen):
        comp = json.loads(json.dumps(comps[i]))
        steps = comp["pattern"]
        keep = [s for s in steps if not s.get("optional")
                or draw(st.booleans(), label=f"keep {comp['name']}.{s['role']}")]
        comp["pattern"] = keep
        roles = {s["role"] for s in keep}
        comp["constraints"] = [c for c in comp.get("constraints", []) if c["role"] in roles]
        comp["priority"] = draw(st.integers(0, 1000), label="priority")
        out.append(comp)
    return {"format_version": 1, "composites": out}
