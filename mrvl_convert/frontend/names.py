"""File and directory names derived from model and graph names.

Every artifact file is named after the model (``<name>_mrvl_<k>-nodes.json``,
``<name>_cpu_<k>.onnx``, ``<name>.html``...) and the CLI's directory for it too, so a name is
bounded (a 240-character file name or a 10,000-character graph name would exceed the file
system's 255 bytes once suffixed), never starts with ``-`` (a command-line option to every tool
that is handed the file) or ``.`` (hidden, or ``..``), and holds no path separator. The text the
name was made from is kept in the manifest (``model.name_original``) when it differs.
"""
from __future__ import annotations

import hashlib
import re
from typing import Optional

MAX_NAME = 64       # leaves room for the longest suffix ("_mrvl_<k>-consts.json") under 255
_HASH_CHARS = 8     # a cut name ends with "_" + this many hex digits of the full text's sha256


def safe_name(text: str) -> str:
    """A file-name-safe version of a model name: ``[A-Za-z0-9_.-]``, at most ``MAX_NAME``
    characters, not starting with ``-`` or ``.``; a name that had to be cut ends with a short
    hash of the whole text, so two long names that share a beginning stay distinct.
    ``safe_name(safe_name(x)) == safe_name(x)``."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).lstrip("._-").rstrip("._")
    if not cleaned:
        return "model"
    if len(cleaned) <= MAX_NAME:
        return cleaned
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    head = cleaned[:MAX_NAME - _HASH_CHARS - 1].rstrip("._-")
    return f"{head}_{digest}"


def name_source(name: Optional[str], own_name: Optional[str]) -> str:
    """The text an artifact's name is made from: ``name`` when given, else the model's own name
    (file stem or graph name). A given name that is ``safe_name`` of the model's own name (what
    mrvl-convert passes for ``-lead.onnx``: ``lead``) came from it: the own name is the
    original."""
    if name and own_name and name == safe_name(own_name):
        return own_name
    return name or own_name or "model"
