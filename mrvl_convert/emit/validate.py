"""Schema validation of the JSON files the library writes and reads (schemas/ ships inside the
package).

A document the converter has just built (Nodes-JSON, Constants-JSON, manifest, report) is checked
as it is written only under ``MRVL_CONVERT_SELF_CHECK`` (``self_check``): the test suite sets it,
so every artifact its tests write is checked, and a user can set it, or check a directory
afterwards with ``python -m mrvl_convert.emit DIR``. Why not always: checking a transformer's
Nodes-JSON with jsonschema took as long as building it (docs/BENCHMARKS.md). Documents read
from disk (an artifact handed to the estimator, an earlier summary.json) are always checked.
"""
from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Tuple

import jsonschema

from mrvl_convert.errors import ArtifactError

SCHEMAS = ("nodes", "consts", "manifest", "report", "rules", "summary")
SELF_CHECK_ENV = "MRVL_CONVERT_SELF_CHECK"


def self_check() -> bool:
    """``MRVL_CONVERT_SELF_CHECK`` set (not empty, not 0): the converter checks each document
    it builds against its schema as it writes it."""
    return os.environ.get(SELF_CHECK_ENV, "") not in ("", "0")


@functools.lru_cache(maxsize=None)
def validator(kind: str) -> jsonschema.Draft202012Validator:
    if kind not in SCHEMAS:
        raise ValueError(f"unknown schema {kind!r}")
    text = resources.files("mrvl_convert.schemas").joinpath(f"{kind}.schema.json").read_text()
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(_inline_refs(schema, schema.get("$defs", {})))


_DEFS = "#/$defs/"


def _inline_refs(node: Any, defs: Dict[str, Any], within: Tuple[str, ...] = ()) -> Any:
    """``node`` with each plain ``{"$ref": "#/$defs/X"}`` replaced by X itself (but where X
    refers to itself): the validator resolves a ``$ref`` anew at every use, which was most of
    the time a Nodes-JSON took to validate."""
    if isinstance(node, list):
        return [_inline_refs(v, defs, within) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if len(node) == 1 and isinstance(ref, str) and ref.startswith(_DEFS):
        name = ref[len(_DEFS):]
        if name in defs and name not in within:
            return _inline_refs(defs[name], defs, within + (name,))
    return {k: _inline_refs(v, defs, within) for k, v in node.items()}


def validate(document: Any, kind: str, *, label: str) -> None:
    """Raise ArtifactError naming the file and the first offending field."""
    errors = sorted(validator(kind).iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.absolute_path) or "<top level>"
        raise ArtifactError(f"{label} does not match {kind}.schema.json at {where}: "
                            f"{error.message[:300]}")


def kind_of(file_name: str) -> str:
    """Which schema a file of the artifact directory follows, from its name."""
    if file_name.endswith("-nodes.json"):
        return "nodes"
    if file_name.endswith("-consts.json"):
        return "consts"
    stem = file_name[:-len(".json")]
    if stem in SCHEMAS:
        return stem
    raise ArtifactError(f"{file_name}: no schema for this file")


def validate_tree(root: Path) -> int:
    """Validate every JSON file below ``root``; return how many were checked."""
    count = 0
    for path in sorted(Path(root).rglob("*.json")):
        validate(json.loads(path.read_text(encoding="utf-8")), kind_of(path.name), label=str(path))
        count += 1
    return count

