"""What an attacker or a broken tool writes into a document: raw JSON values (``HOSTILE_JSON``,
put where ``PLACEHOLDER`` was planted at one of the ``locations`` of a document) and YAML text
inserted into a rule file (``HOSTILE_YAML``). The fuzz tests draw from them."""
from __future__ import annotations

from typing import Any, List, Tuple

PLACEHOLDER = "__HOSTILE__"

# Raw JSON text: what a value is replaced with ("{outside}" is the canary directory).
HOSTILE_JSON = (
    '"../outside/canary.json"', '"../../outside/canary.bin"', '"{outside}/canary.json"',
    '"link.json"', '"x/../../outside/w.bin"', '"a\\u0000b"', '"C:\\\\outside\\\\canary.json"',
    "9" * 5000, "-1", "0", "1e999", "-1e999", "NaN", "Infinity", "4294967296",
    str(2 ** 63), "1.5", "true", "null", "[]", "{}", '""',
    "[" * 3000 + "]" * 3000, '{"a":' * 2000 + "1" + "}" * 2000,
    '"bfloat16"', '"float64"', '"int8"', '"int64"', '"string"',
    "[4294967296, 4294967296]", "[[1]]", '["1", "x"]',
)
# YAML text inserted at a line boundary of the built-in rule file.
HOSTILE_YAML = (
    "bomb0: &b0 [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"bomb{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * 9) + "]\n" for i in range(1, 9)),
    "deep: " + "[" * 2000 + "]" * 2000 + "\n",
    "big: " + "9" * 20_000 + "\n",
    "path: !!python/object/apply:os.system [echo]\n",
    "file: !include ../outside/canary.json\n",
    "limits: {max_batch: " + "9" * 400 + "}\n",
    "anchor: &a {x: 1}\nmerge: {<<: *a}\n",
    "\t- broken\n",
)


def locations(doc: Any, path: Tuple = ()) -> List[Tuple]:
    """Every place a value sits in doc, as key/index paths (the consts' payloads once each)."""
    found = [path] if path else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += locations(value, path + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc[:4]):   # long lists: their first items stand for all
            found += locations(value, path + (index,))
    return found


def plant_placeholder(doc: Any, path: Tuple) -> None:
    for step in path[:-1]:
        doc = doc[step]
    doc[path[-1]] = PLACEHOLDER
