"""Read rule files (YAML or JSON), validate them, and turn them into frozen ``Rule`` objects."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import string
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import jsonschema


from mrvl_convert.errors import RuleFileError
from mrvl_convert.layers import CATALOGUE, MARVELL, UPSTREAM
from mrvl_convert.layers import QDQ_ROLES
from mrvl_convert.ir.match import Constraint, Rule, Step
from mrvl_convert.core.bounded_yaml import parse_bounded_yaml

# Bounds on a rule file (user input): the built-in one is 11 KiB, 8 levels, about 1,500 nodes.
MAX_RULE_FILE_BYTES = 1 << 20
RuleSource = Union[str, Path]
LAYER_SETS = (UPSTREAM, MARVELL)


def _rules_schema() -> dict:
    text = resources.files("mrvl_convert.schemas").joinpath("rules.schema.json").read_text()
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def _rules_folder() -> Path:
    """The package's rules folder: where it is does not change while the process runs (asking
    importlib.resources was a tenth of a small model's conversion, several times each)."""
    return Path(str(resources.files("mrvl_convert.rules")))


def builtin_path() -> Path:
    return _rules_folder() / "builtin.yaml"


def load_rule_file(path: RuleSource, inherited: Optional["Generic"] = None) -> List[Rule]:
    """Parse and validate one rule file; every problem is a RuleFileError naming the field."""
    path = Path(path)
    label = str(path)
    data = parse_bounded_yaml(_read_text(path, label), label)
    source = "builtin" if path.resolve() == builtin_path().resolve() else label
    return parse_rules(data, source=source, label=label, inherited=inherited)


def _read_text(path: Path, label: str) -> str:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RULE_FILE_BYTES + 1)
        if len(raw) > MAX_RULE_FILE_BYTES:
            raise RuleFileError(f"rule file {label} is larger than {MAX_RULE_FILE_BYTES} bytes")
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleFileError(f"rule file {label} cannot be read: {exc}") from None


@dataclass(frozen=True)
class Generic:
    """What a rule file says once for all its composites: named limits, generic constraints."""
    limits: Mapping[str, int] = field(default_factory=dict)
    defaults: Tuple[dict, ...] = ()


def parse_rules(data: object, *, source: str, label: str,
                inherited: Optional[Generic] = None) -> List[Rule]:
    """Validate a rule document and build its rules. A file that states no ``defaults`` gets
    ``inherited``'s (the built-in ones): the accelerator's limits hold for every composite."""
    validator = jsonschema.Draft202012Validator(_rules_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = _field(error.absolute_path)
        raise RuleFileError(f"rule file {label}: field {where}: {error.message}")
    generic = _generic(data, inherited or Generic())
    rules = [_build_rule(entry, index, source, label, generic)
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


def _generic(data: dict, inherited: Generic) -> Generic:
    limits = {**inherited.limits, **data.get("limits", {})}
    defaults = tuple(data["defaults"]) if "defaults" in data else inherited.defaults
    return Generic(MappingProxyType(limits), defaults)


def _resolve_args(args: Mapping, limits: Mapping[str, int], where: str) -> Dict:
    """Constraint args may name a limit (``max: max_batch``) instead of stating a number; the
    name is kept as ``limit`` (a check may treat the accelerator's limits apart from a layer's
    own number: ``batch_at_most``)."""
    resolved = dict(args)
    for key, value in args.items():
        if key == "max" and isinstance(value, str):
            if value not in limits:
                raise RuleFileError(f"{where}.args.{key}: no limit named {value!r} (known: "
                                    f"{sorted(limits)})")
            resolved[key] = limits[value]
            resolved["limit"] = value
    return resolved


def _build_rule(entry: dict, index: int, source: str, label: str, generic: Generic) -> Rule:
    where = f"rule file {label}: field composites[{index}]"
    steps = tuple(Step(role=s["role"], ops=tuple(s["op"]), optional=bool(s.get("optional", False)))
                  for s in entry["pattern"])
    roles = [s.role for s in steps]
    if len(set(roles)) != len(roles):
        raise RuleFileError(f"{where}.pattern: a role is used twice ({roles})")
    if all(s.optional for s in steps):
        raise RuleFileError(f"{where}.pattern: at least one step must be required")
    kind = CATALOGUE[entry["layer"]]
    required = kind.required_roles
    optional = kind.optional_roles | kind.one_of_roles | QDQ_ROLES
    missing = required - set(roles)
    unknown = set(roles) - required - optional
    if missing or unknown:
        raise RuleFileError(
            f"{where}.pattern: layer {entry['layer']} needs roles {sorted(required)} and may use "
            f"{sorted(optional)}; missing {sorted(missing)}, unknown {sorted(unknown)}")
    if kind.one_of_roles and not kind.one_of_roles & set(roles):
        raise RuleFileError(f"{where}.pattern: layer {entry['layer']} needs one of the roles "
                            f"{sorted(kind.one_of_roles)}")
    anchor = next(s.role for s in steps if not s.optional)
    about = entry.get("anchor", "")
    if about and about not in {s.role for s in steps if not s.optional}:
        raise RuleFileError(f"{where}.anchor: {about!r} is not the role of a required step of "
                            f"the pattern ({roles})")
    opt_out = set(entry.get("opt_out", []))
    constraints = []
    for g_index, g in enumerate(generic.defaults):
        if g["check"] not in opt_out:
            g_where = f"rule file {label}: field defaults[{g_index}]"
            _check_reason(g["reason"], f"{g_where}.reason")
            constraints.append(Constraint(role=anchor, check=g["check"], reason=g["reason"],
                                          args=_resolve_args(g.get("args", {}), generic.limits,
                                                             g_where), generic=True))
    for c_index, c in enumerate(entry.get("constraints", [])):
        c_where = f"{where}.constraints[{c_index}]"
        if c["role"] not in roles:
            raise RuleFileError(f"{c_where}.role: {c['role']!r} is not a role "
                                f"of the pattern ({roles})")
        _check_reason(c["reason"], f"{c_where}.reason")
        constraints.append(Constraint(role=c["role"], check=c["check"], reason=c["reason"],
                                      args=_resolve_args(c.get("args", {}), generic.limits,
                                                         c_where)))
    return Rule(name=entry["name"], layer=entry["layer"], steps=steps,
                constraints=tuple(constraints), priority=int(entry.get("priority", 100)),
                summary=entry.get("summary", ""), source=source,
                absorb=tuple(entry.get("absorb", ())), note=entry.get("note", ""), anchor=about)


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


def builtin_paths(layer_set: str = MARVELL) -> List[Path]:
    """The built-in rule files of a layer set: upstream v0.19's composites (builtin.yaml), and
    for the newer Marvell set also every file in rules/marvell/, in name order."""
    if layer_set not in LAYER_SETS:
        raise RuleFileError(f"unknown layer set {layer_set!r}; choose one of "
                            f"{', '.join(LAYER_SETS)}")
    paths = [builtin_path()]
    if layer_set == MARVELL:
        folder = _rules_folder() / "marvell"
        paths += _yaml_files(str(folder), _stamp(folder))
    return paths


def _stamp(path: Path) -> Optional[Tuple[int, int, int]]:
    """What changes when a file (or a folder's listing) does: the cache key of its contents."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


@functools.lru_cache(maxsize=8)
def _yaml_files(folder: str, stamp: Optional[Tuple[int, int, int]]) -> Tuple[Path, ...]:
    """The .yaml files of ``folder`` in name order, listed again when its stamp changes."""
    if stamp is None or not os.path.isdir(folder):
        return ()
    return tuple(sorted(p for p in Path(folder).iterdir() if p.name.endswith(".yaml")))


@functools.lru_cache(maxsize=64)
def _builtin_file(path: str, stamp: Optional[Tuple[int, int, int]]) -> Tuple[str, str]:
    """(text, sha256 of the bytes) of a built-in rule file, read again when its stamp changes:
    an edited file is never served from a cache (reading 14 files every conversion, twice, was
    a tenth of a small model's conversion)."""
    text = _read_text(Path(path), path)
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()


def builtin_digests(layer_set: str = MARVELL) -> List[Tuple[Path, str]]:
    """(path, sha256 of its bytes) of each built-in rule file of ``layer_set`` (the manifest's
    ``rules``)."""
    return [(path, _builtin_file(str(path), _stamp(path))[1])
            for path in builtin_paths(layer_set)]


def _builtin_texts(layer_set: str) -> Tuple[Tuple[str, str], ...]:
    """(path, text) of each built-in rule file, as it is on disk now (see ``_builtin_file``)."""
    return tuple((str(path), _builtin_file(str(path), _stamp(path))[0])
                 for path in builtin_paths(layer_set))


# Parsing and validating the built-in files is most of a small model's conversion time; they
# are the package's own files, so one parse per process and content serves every conversion
# (Rule objects are frozen). User rule files are parsed with every bound on every call.
@functools.lru_cache(maxsize=8)
def _parsed_builtins(texts: Tuple[Tuple[str, str], ...]) -> Tuple[Generic, Tuple[Rule, ...]]:
    documents = [(label, parse_bounded_yaml(text, label)) for label, text in texts]
    generic = _generic(documents[0][1], Generic())
    rules: List[Rule] = []
    for index, (label, data) in enumerate(documents):
        rules += parse_rules(data, source=label if index else "builtin", label=label,
                             inherited=generic)
    return generic, tuple(rules)


@functools.lru_cache(maxsize=8)
def _builtin_set(texts: Tuple[Tuple[str, str], ...], layer_set: str) -> Tuple[Rule, ...]:
    """The built-in rules of ``layer_set``, in order: rules/marvell/ may replace a built-in
    (the replaced one's place moves to the end). Frozen rules, so one list per content."""
    rules: List[Rule] = []
    for rule in _parsed_builtins(texts)[1]:
        if layer_set in CATALOGUE[rule.layer].layer_sets:
            rules = [r for r in rules if r.name != rule.name] + [rule]
    return tuple(rules)


def load_rules(extra: Optional[Union[RuleSource, Sequence[RuleSource]]] = None,
               *, include_builtin: bool = True, layer_set: str = MARVELL) -> List[Rule]:
    """The built-in rules of ``layer_set`` plus user rule files; a later composite with an
    earlier one's name replaces it. Only composites whose layer kind is in the set are kept."""
    if extra is None:
        extra = []
    elif isinstance(extra, (str, Path)):
        extra = [extra]
    texts = _builtin_texts(layer_set)
    generic = _parsed_builtins(texts)[0]
    rules = list(_builtin_set(texts, layer_set)) if include_builtin else []
    for path in extra:
        for rule in load_rule_file(path, generic):
            if layer_set not in CATALOGUE[rule.layer].layer_sets:
                raise RuleFileError(f"rule file {path}: composite {rule.name!r} makes layer "
                                    f"{rule.layer}, which is not in layer set {layer_set!r}")
            rules = [r for r in rules if r.name != rule.name] + [rule]
    return rules
