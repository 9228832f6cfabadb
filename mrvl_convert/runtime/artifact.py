"""Reading artifact files strictly: JSON documents and the Constants-JSON's base64 payloads."""
from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any, Dict, List, Tuple

import numpy as np

from ..errors import ArtifactError


def read_json(path: "str | os.PathLike[str]", what: str) -> Any:
    """Load one JSON artifact; a missing or unparsable file is an ArtifactError naming it."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except FileNotFoundError:
        raise ArtifactError(f"{path}: {what} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: {what} is not readable JSON ({exc})") from None


def shape_of(value: Any, path: str, field: str) -> Tuple[int, ...]:
    """A shape: a list of non-negative integers (not bools, not strings)."""
    if not isinstance(value, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
        raise ArtifactError(f"{path}: field '{field}': expected a list of non-negative "
                            f"integers, got {value!r}")
    return tuple(value)


def decode_consts(path: str, doc: Any) -> Dict[str, np.ndarray]:
    """Decode every entry of a Constants-JSON into a read-only float32 array of its shape."""
    if not isinstance(doc, dict):
        raise ArtifactError(f"{path}: a Constants-JSON must be an object of named constants")
    return {name: _decode_one(path, name, entry) for name, entry in doc.items()}


def _decode_one(path: str, name: str, entry: Any) -> np.ndarray:
    where = f"constant {name!r}"
    if not isinstance(entry, dict):
        raise ArtifactError(f"{path}: {where}: expected an object, got {type(entry).__name__}")
    for key in ("shape", "dtype", "data_base64"):
        if key not in entry:
            raise ArtifactError(f"{path}: {where}: field '{key}' is missing")
    shape = shape_of(entry["shape"], path, f"{name}.shape")
    if entry["dtype"] != "float32":
        raise ArtifactError(f"{path}: {where}: field 'dtype' is {entry['dtype']!r}; only "
                            f"'float32' is defined")
    text = entry["data_base64"]
    if not isinstance(text, str):
        raise ArtifactError(f"{path}: {where}: field 'data_base64' must be a string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ArtifactError(f"{path}: {where}: field 'data_base64' is not valid base64 "
                            f"({exc})") from None
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) != 4 * count:
        raise ArtifactError(f"{path}: {where}: field 'data_base64' holds {len(raw)} bytes, but "
                            f"shape {list(shape)} of float32 needs {4 * count}")
    array = np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
    array.setflags(write=False)
    return array


def require(doc: Dict[str, Any], key: str, kind: type, path: str, where: str) -> Any:
    """doc[key] of the given JSON type, or an ArtifactError naming file, place and field."""
    if key not in doc:
        raise ArtifactError(f"{path}: {where}: field '{key}' is missing")
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ArtifactError(f"{path}: {where}: field '{key}' must be a "
                            f"{kind.__name__}, got {value!r}")
    return value


def node_refs(value: Any, path: str, where: str, limit: int) -> List[int]:
    """``[[idx, 0, 0], ...]`` references to earlier nodes (graph-executor order)."""
    if not isinstance(value, list):
        raise ArtifactError(f"{path}: {where}: expected a list of [node, 0, 0] entries")
    refs = []
    for entry in value:
        ok = (isinstance(entry, list) and len(entry) in (2, 3)
              and all(isinstance(v, int) and not isinstance(v, bool) for v in entry))
        if not ok or not 0 <= entry[0] < limit or entry[1] != 0:
            raise ArtifactError(f"{path}: {where}: bad node reference {entry!r} (expected "
                                f"[index < {limit}, 0, 0])")
        refs.append(entry[0])
    return refs
