"""The two commands: ``mrvl-convert`` (``main``) and ``mrvl-verify`` (``verify_main``)."""
from __future__ import annotations

from mrvl_convert.cli.convert import main

# mrvl-verify runs onnxruntime: imported when it is called, so mrvl-convert starts without it.
_LAZY = {"verify_main": ("mrvl_convert.cli.verify", "verify_main")}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'mrvl_convert.cli' has no attribute {name!r}")


__all__ = ["main", "verify_main"]
