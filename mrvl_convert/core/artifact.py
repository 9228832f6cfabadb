"""Reading artifact files strictly: JSON documents and the Constants-JSON's base64 payloads."""
from __future__ import annotations

import base64
import binascii
import json
import math
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mrvl_convert.errors import ArtifactError


# Bounds on what a JSON artifact may ask of the reader. A manifest or Nodes-JSON of a large model
# is a few MiB; a Constants-JSON holds the weights (base64) and is bounded only by the disk.
MAX_JSON_BYTES = 256 << 20
MAX_JSON_DEPTH = 64              # the formats nest 6 deep at most
MAX_INT_DIGITS = 19              # anything longer is not an int64
MAX_DIM = (1 << 31) - 1          # one dimension of a shape
MAX_ELEMENTS = 1 << 34           # elements of one tensor (64 GiB of float32)


class _Refused(ValueError):
    """Raised inside json's hooks; turned into an ArtifactError naming the file."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_constant(text: str) -> Any:
    raise _Refused(f"{text} is not JSON")


def read_json(path: "str | os.PathLike[str]", what: str, *,
              max_bytes: Optional[int] = MAX_JSON_BYTES) -> Any:
    """Load one JSON artifact, bounded in size (``max_bytes``, None: no limit), nesting depth and
    integer length; anything else is an ArtifactError naming the file."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if max_bytes is not None and size > max_bytes:
                raise ArtifactError(f"{path}: {what} is {size} bytes, more than the "
                                    f"{max_bytes} a {what} may have")
            doc = json.loads(handle.read(), parse_int=_parse_int,
                             parse_constant=_parse_constant)
    except FileNotFoundError:
        raise ArtifactError(f"{path}: {what} not found") from None
    except RecursionError:
        raise ArtifactError(f"{path}: {what} nests deeper than JSON can be read") from None
    except _Refused as exc:
        raise ArtifactError(f"{path}: {what} is refused: {exc}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: {what} is not readable JSON ({exc})") from None
    if depth_exceeds(doc, MAX_JSON_DEPTH):
        raise ArtifactError(f"{path}: {what} nests deeper than {MAX_JSON_DEPTH} levels")
    return doc


def depth_exceeds(doc: Any, limit: int) -> bool:
    """True when lists/dicts nest more than ``limit`` deep (iterative: no recursion limit)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            if depth > limit:
                return True
            stack.extend((item, depth + 1) for item in value)
    return False


def shape_of(value: Any, path: str, field: str) -> Tuple[int, ...]:
    """A shape: a list of non-negative integers (not bools, not strings), of bounded size."""
    if not isinstance(value, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
        raise ArtifactError(f"{path}: field '{field}': expected a list of non-negative "
                            f"integers, got {_short(value)}")
    if len(value) > 8 or any(d > MAX_DIM for d in value) or math.prod(value) > MAX_ELEMENTS:
        raise ArtifactError(f"{path}: field '{field}': shape {_short(value)} is beyond the "
                            f"limits (rank 8, {MAX_DIM} per dimension, {MAX_ELEMENTS} elements)")
    return tuple(value)


def dims_of(value: Any, path: str, field: str) -> Tuple[Optional[int], ...]:
    """A shape whose dims may be None (null: a dim only the run decides), else as ``shape_of``."""
    if not isinstance(value, list):
        return shape_of(value, path, field)
    known = [d for d in value if d is not None]
    shape_of(known, path, field)
    return tuple(value)


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# Constant dtypes and their little-endian layouts: float32, and the int8 layers' weights and biases.
_CONST_DTYPES = {"float32": "<f4", "int8": "<i1", "int32": "<i4"}


def decode_consts(path: str, doc: Any) -> Dict[str, np.ndarray]:
    """Decode every entry of a Constants-JSON into a read-only array of its shape and dtype."""
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
    if not isinstance(entry["dtype"], str) or entry["dtype"] not in _CONST_DTYPES:
        raise ArtifactError(f"{path}: {where}: field 'dtype' is {entry['dtype']!r}; only "
                            f"{', '.join(map(repr, _CONST_DTYPES))} are defined")
    layout = _CONST_DTYPES[entry["dtype"]]
    text = entry["data_base64"]
    if not isinstance(text, str):
        raise ArtifactError(f"{path}: {where}: field 'data_base64' must be a string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ArtifactError(f"{path}: {where}: field 'data_base64' is not valid base64 "
                            f"({exc})") from None
    count = math.prod(shape)
    size = np.dtype(layout).itemsize
    if len(raw) != size * count:
        raise ArtifactError(f"{path}: {where}: field 'data_base64' holds {len(raw)} bytes, but "
                            f"shape {list(shape)} of {entry['dtype']} needs {size * count}")
    array = np.frombuffer(raw, dtype=layout).reshape(shape).astype(np.dtype(layout).type)
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


def node_entries(value: Any, path: str, where: str, limit: int) -> List[Tuple[int, int]]:
    """``[[idx, slot, 0], ...]`` references to outputs of earlier nodes: (node, output slot);
    the slot is 0 except for a multi-output layer (Split)."""
    if not isinstance(value, list):
        raise ArtifactError(f"{path}: {where}: expected a list of [node, slot, 0] entries")
    entries = []
    for entry in value:
        ok = (isinstance(entry, list) and len(entry) in (2, 3)
              and all(isinstance(v, int) and not isinstance(v, bool) for v in entry))
        if not ok or not 0 <= entry[0] < limit or entry[1] < 0 or entry[2:] not in ([], [0]):
            raise ArtifactError(f"{path}: {where}: bad node reference {entry!r} (expected "
                                f"[index < {limit}, output slot, 0])")
        entries.append((entry[0], entry[1]))
    return entries


def first_value(value: Any) -> Any:
    """The value of a one-element list attribute (``["relu"]`` -> ``"relu"``); None if empty."""
    if isinstance(value, list):
        return value[0] if value else None
    return value
