"""The base64 text of a Constants-JSON's arrays, and the file's bytes streamed from it.

A Constants-JSON is written compact, byte for byte as ``json.JSONEncoder(separators=(",", ":"),
ensure_ascii=False)`` writes it; its base64 strings (nearly all of its bytes) are copied in as
they are, not scanned by the encoder (``Base64Text``).
"""
from __future__ import annotations

import binascii
import json
from typing import Any, Dict, Iterator

import numpy as np


def _encoder() -> json.JSONEncoder:
    return json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class Base64Text(str):
    """Base64 text that ``of`` made from an array's bytes. Valid by construction: the
    Constants-JSON writer validates it as an empty string and copies it into the file as it is
    (its alphabet needs no escaping), where the schema's pattern and the JSON encoder would each
    scan the largest strings of the artifact once more."""

    @classmethod
    def of(cls, array: np.ndarray) -> "Base64Text":
        """``array`` C-contiguous: encoded from its own buffer, never copied into bytes first."""
        return cls(binascii.b2a_base64(array, newline=False), "ascii")


def without_base64(document: Any) -> Any:
    """A Constants-JSON with each ``Base64Text`` as "": what is left to validate."""
    if not isinstance(document, dict):
        return document
    return {name: {k: "" if isinstance(v, Base64Text) else v for k, v in entry.items()}
            if isinstance(entry, dict) else entry for name, entry in document.items()}


def consts_chunks(document: Dict[str, Dict[str, Any]]) -> Iterator[bytes]:
    """A validated Constants-JSON, byte for byte as the compact encoder writes it, each
    ``Base64Text`` copied without the encoder's escaping pass."""
    encoder = _encoder()
    ascii_of = _SharedText(document)
    yield b"{"
    for k, (name, entry) in enumerate(document.items()):
        yield f"{',' if k else ''}{encoder.encode(name)}:{{".encode("utf-8")
        for j, (key, value) in enumerate(entry.items()):
            head = f"{',' if j else ''}{encoder.encode(key)}:"
            if isinstance(value, Base64Text):
                yield f'{head}"'.encode("utf-8")
                yield ascii_of(value)
                yield b'"'
            else:
                yield (head + encoder.encode(value)).encode("utf-8")
        yield b"}"
    yield b"}\n"


class _SharedText:
    """Each ``Base64Text`` of a Constants-JSON as bytes, encoded once when several entries
    share it (the layers of an unrolled cell's steps, ``emit/mrvl_json.py``) and held only
    until its last entry is written."""

    def __init__(self, document: Dict[str, Dict[str, Any]]) -> None:
        self._left: Dict[int, int] = {}
        for entry in document.values():
            for value in entry.values():
                if isinstance(value, Base64Text):
                    self._left[id(value)] = self._left.get(id(value), 0) + 1
        self._held: Dict[int, bytes] = {}

    def __call__(self, value: "Base64Text") -> bytes:
        key = id(value)
        data = self._held.pop(key, None)
        if data is None:
            data = value.encode("ascii")
        self._left[key] -= 1
        if self._left[key]:
            self._held[key] = data
        return data
