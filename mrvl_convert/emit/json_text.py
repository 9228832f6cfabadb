"""Indented JSON text, byte for byte as ``json.JSONEncoder(indent=2, ensure_ascii=False)``
writes it, in far fewer Python steps.

The standard library encodes an indented document in pure Python (its C encoder takes no
indent before Python 3.14): a generator frame per container and a string per token, about 1.4
million for an unrolled model's 11 MB Nodes-JSON. Here the containers whose items hold no
container (a shape, an attribute list: most of a Nodes-JSON) are collected per depth and each
depth's are encoded by the C encoder in one call, its item separator ``",\\n"`` plus their
items' indent and its key separator ``": "``: exactly the text the indented encoder puts
between their items. That text is then cut apart where one container ends and the next begins
(a ``]`` or ``}`` before the separator and a ``[`` or ``{`` after it: no scalar's text ends
or starts so, their items being scalars) and their brackets' line breaks placed, by
``str.replace``. The containers holding containers are walked here. Text is handed out every
``block`` pieces, so a large document is not held as one string.

Requires: a document the standard encoder accepts (str keys, or the float/int/bool/None keys it
converts; scalars, lists, tuples, dicts). Ensures: ``iterencode(doc)`` joined is
``json.JSONEncoder(indent=2, ensure_ascii=False).encode(doc)`` (the same escaping, float
``repr``, ``NaN``/``Infinity``, key conversion, and ``TypeError`` for an object it cannot
encode). A container that holds itself recurses until Python's limit instead of the standard
``ValueError`` (the converter's documents are trees it builds).
"""
from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any, Dict, Iterator, List, Optional, Tuple

_NESTED = (list, tuple, dict)
_CUT = "\x00"  # never in JSON text: the encoders escape every control character in strings
_INFINITE = (float("inf"), float("-inf"))
_BLOCK = 1 << 14


def _holds_containers(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return any(isinstance(item, _NESTED) for item in items)


class _Text:
    """The pieces of text not handed out yet (``None`` where a flat container's text will go)
    and the flat containers per depth: (containers, their places in ``pieces``)."""

    def __init__(self) -> None:
        self.pieces: List[Optional[str]] = []
        self.flats: Dict[int, Tuple[list, List[int]]] = {}


class IndentedJSON:
    """The encoder for one indent width; reusable between documents."""

    def __init__(self, indent: int = 2, block: int = _BLOCK) -> None:
        self._unit = " " * indent
        self._block = block  # pieces held before they are joined and handed out
        self._flat: Dict[int, json.JSONEncoder] = {}  # items' depth -> its encoder

    def _encoder(self, depth: int) -> json.JSONEncoder:
        encoder = self._flat.get(depth)
        if encoder is None:
            encoder = json.JSONEncoder(ensure_ascii=False,
                                       separators=(",\n" + self._unit * depth, ": "))
            self._flat[depth] = encoder
        return encoder

    def iterencode(self, document: Any) -> Iterator[str]:
        """The document's text in blocks (not the standard encoder's pieces; the same text)."""
        if not isinstance(document, _NESTED):
            yield self._leaf(document)
            return
        text = _Text()
        for _ in self._walk(document, 0, text, streamed=2):
            if len(text.pieces) >= self._block:
                yield self._joined(text)
                text.pieces, text.flats = [], {}
        yield self._joined(text)

    def _leaf(self, value: Any) -> str:
        """A scalar's text, tested in the standard encoder's order (``bool`` before ``int``)."""
        if isinstance(value, str):
            return encode_basestring(value)
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if isinstance(value, int):
            return int.__repr__(value)
        if isinstance(value, float) and value == value and value not in _INFINITE:
            return float.__repr__(value)
        # NaN and the infinities as the encoder spells them, or its TypeError
        return self._encoder(0).encode([value])[1:-1]

    def _walk(self, value: Any, depth: int, text: _Text, streamed: int) -> Iterator[None]:
        """Append the container's pieces to ``text``, yielding after each item (where the
        caller may hand out what is done); at depth ``streamed`` and below, ``_add``."""
        if not _holds_containers(value):
            self._add(value, depth, text)
            return
        is_dict = isinstance(value, dict)
        inner = depth + 1
        head, separator = self._heads(is_dict, inner)
        for name, item in self._named(value, is_dict):
            if isinstance(item, _NESTED):
                text.pieces.append(head + name)
                if inner < streamed:
                    yield from self._walk(item, inner, text, streamed)
                else:
                    self._add(item, inner, text)
            else:
                text.pieces.append(head + name + self._leaf(item))
            head = separator
            yield
        text.pieces.append("\n" + self._unit * depth + ("}" if is_dict else "]"))

    def _add(self, value: Any, depth: int, text: _Text) -> None:
        """Append the container's pieces to ``text`` (a flat one as a place to fill). Plain
        loops, not generators: this runs once per container of the document."""
        pieces = text.pieces
        is_dict = isinstance(value, dict)
        for item in (value.values() if is_dict else value):
            if isinstance(item, _NESTED):
                break
        else:  # flat
            if not value:
                pieces.append("{}" if is_dict else "[]")
                return
            group = text.flats.get(depth + 1)
            if group is None:
                group = text.flats[depth + 1] = ([], [])
            group[0].append(value)
            group[1].append(len(pieces))
            pieces.append(None)
            return
        head, separator = self._heads(is_dict, depth + 1)
        if is_dict:
            for key, item in value.items():
                name = encode_basestring(key) if isinstance(key, str) else self._key(key)
                if isinstance(item, _NESTED):
                    pieces.append(f"{head}{name}: ")
                    self._add(item, depth + 1, text)
                else:
                    leaf = encode_basestring(item) if isinstance(item, str) else self._leaf(item)
                    pieces.append(f"{head}{name}: {leaf}")
                head = separator
        else:
            for item in value:
                if isinstance(item, _NESTED):
                    pieces.append(head)
                    self._add(item, depth + 1, text)
                else:
                    leaf = encode_basestring(item) if isinstance(item, str) else self._leaf(item)
                    pieces.append(head + leaf)
                head = separator
        pieces.append("\n" + self._unit * depth + ("}" if is_dict else "]"))

    def _heads(self, is_dict: bool, inner: int) -> Tuple[str, str]:
        """What goes before a container's first item and before each other one."""
        indent = "\n" + self._unit * inner
        return ("{" if is_dict else "[") + indent, "," + indent

    def _named(self, value: Any, is_dict: bool) -> Iterator[Tuple[str, Any]]:
        """(``"key": `` or "", item) for each item."""
        if is_dict:
            return ((self._key(key) + ": ", item) for key, item in value.items())
        return (("", item) for item in value)

    def _key(self, key: Any) -> str:
        if isinstance(key, str):
            return encode_basestring(key)
        # a float/int/bool/None key as the standard encoder converts it (or its TypeError)
        return self._encoder(0).encode({key: None})[1:-len(": null}")]

    def _joined(self, text: _Text) -> str:
        """The pieces joined, each flat container's text in its place."""
        pieces = text.pieces
        for depth, (values, where) in text.flats.items():
            body = self._encoder(depth).encode(values)[1:-1]
            separator = ",\n" + self._unit * depth
            outer, inner = "\n" + self._unit * (depth - 1), "\n" + self._unit * depth
            middle = body[1:-1]
            # one container's end, the separator, the next one's start: cut there (str.replace
            # of the four bracket pairs, not a regular expression's Python-level template)
            for end in "]}":
                for start in "[{":
                    middle = middle.replace(end + separator + start,
                                            f"{outer}{end}{_CUT}{start}{inner}")
            body = f"{body[0]}{inner}{middle}{outer}{body[-1]}"
            for index, piece in zip(where, body.split(_CUT)):
                pieces[index] = piece
        return "".join(pieces)  # type: ignore[arg-type]

