"""Schema validation of every JSON file the library writes (schemas/ ships inside the package)."""
from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import jsonschema

from ..errors import ArtifactError

SCHEMAS = ("nodes", "consts", "manifest", "report", "rules", "summary")


@functools.lru_cache(maxsize=None)
def validator(kind: str) -> jsonschema.Draft202012Validator:
    if kind not in SCHEMAS:
        raise ValueError(f"unknown schema {kind!r}")
    text = resources.files("mrvl_convert.schemas").joinpath(f"{kind}.schema.json").read_text()
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate(document: Any, kind: str, *, label: str) -> None:
    """Raise ArtifactError naming the file and the first offending field."""
    errors = sorted(validator(kind).iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.absolute_path) or "<top level>"
        raise ArtifactError(f"{label} does not match {kind}.schema.json at {where}: "
                            f"{error.message[:300]}")
