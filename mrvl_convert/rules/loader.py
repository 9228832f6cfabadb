"""Read rule files (YAML or JSON), validate them, and turn them into frozen ``Rule`` objects."""
from __future__ import annotations

import json
import string
from importlib import resources
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Union

import jsonschema
import yaml

from ..errors import RuleFileError
from .model import LAYER_ROLES, Constraint, Rule, Step

BUILTIN = "builtin"
RuleSource = Union[str, Path]


def _rules_schema() -> dict:
    text = resources.files("mrvl_convert.schemas").joinpath("rules.schema.json").read_text()
    return json.loads(text)


def builtin_path() -> Path:
    return Path(str(resources.files("mrvl_convert.rules").joinpath("builtin.yaml")))


def load_rule_file(path: RuleSource) -> List[Rule]:
    """Parse and validate one rule file; every problem is a RuleFileError naming the field."""
    path = Path(path)
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleFileError(f"rule file {label} cannot be read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RuleFileError(f"rule file {label} is not valid YAML/JSON: "
                            f"{str(exc).splitlines()[0]}") from None
    source = "builtin" if path.resolve() == builtin_path().resolve() else label
    return parse_rules(data, source=source, label=label)


def parse_rules(data: object, *, source: str, label: str) -> List[Rule]:
    validator = jsonschema.Draft202012Validator(_rules_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = _field(error.absolute_path)
        raise RuleFileError(f"rule file {label}: field {where}: {error.message}")
    rules = [_build_rule(entry, index, source, label)
             for index, entry in enumerate(data["composites"])]
    names = [r.name for r in rules]
    for name in names:
        if names.count(name) > 1:
            raise RuleFileError(f"rule file {label}: composite name {name!r} is used twice")
    return rules


def _field(path: Iterable) -> str:
    parts = []
    for part in path:
        parts.append(f"[{part}]" if isinstance(part, int) else (f".{part}" if parts else part))
    return "".join(parts) or "<top level>"


def _build_rule(entry: dict, index: int, source: str, label: str) -> Rule:
    where = f"rule file {label}: field composites[{index}]"
    steps = tuple(Step(role=s["role"], ops=tuple(s["op"]), optional=bool(s.get("optional", False)))
                  for s in entry["pattern"])
    roles = [s.role for s in steps]
    if len(set(roles)) != len(roles):
        raise RuleFileError(f"{where}.pattern: a role is used twice ({roles})")
    if all(s.optional for s in steps):
        raise RuleFileError(f"{where}.pattern: at least one step must be required")
    required, optional = LAYER_ROLES[entry["layer"]]
    missing = required - set(roles)
    unknown = set(roles) - required - optional
    if missing or unknown:
        raise RuleFileError(
            f"{where}.pattern: layer {entry['layer']} needs roles {sorted(required)} and may use "
            f"{sorted(optional)}; missing {sorted(missing)}, unknown {sorted(unknown)}")
    constraints = []
    for c_index, c in enumerate(entry.get("constraints", [])):
        if c["role"] not in roles:
            raise RuleFileError(f"{where}.constraints[{c_index}].role: {c['role']!r} is not a role "
                                f"of the pattern ({roles})")
        _check_reason(c["reason"], f"{where}.constraints[{c_index}].reason")
        constraints.append(Constraint(role=c["role"], check=c["check"], reason=c["reason"],
                                      args=dict(c.get("args", {}))))
    return Rule(name=entry["name"], layer=entry["layer"], steps=steps,
                constraints=tuple(constraints), priority=int(entry.get("priority", 100)),
                summary=entry.get("summary", ""), source=source)


def _check_reason(reason: str, where: str) -> None:
    """A reason is shown with str.format_map: only plain {name} placeholders may appear in it."""
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(reason)
                  if f is not None]
    except ValueError as exc:
        raise RuleFileError(f"{where}: {exc} (write a literal brace as {{{{ or }}}})") from None
    for name, spec, conversion in fields:
        if not name.isidentifier() or spec or conversion:
            raise RuleFileError(f"{where}: placeholder {{{name}}} must be a plain name such as "
                                "{detail}, with no format spec or conversion")


def load_rules(extra: Optional[Union[RuleSource, Sequence[RuleSource]]] = None,
               *, include_builtin: bool = True) -> List[Rule]:
    """The built-in rules plus user rule files. A user composite with a built-in's name replaces it."""
    if extra is None:
        extra = []
    elif isinstance(extra, (str, Path)):
        extra = [extra]
    rules: List[Rule] = load_rule_file(builtin_path()) if include_builtin else []
    for path in extra:
        for rule in load_rule_file(path):
            rules = [r for r in rules if r.name != rule.name] + [rule]
    return rules
