"""The two commands: ``mrvl-convert`` (``main``) and ``mrvl-verify`` (``verify_main``)."""
from __future__ import annotations

from mrvl_convert.cli.convert import main, verify_main

__all__ = ["main", "verify_main"]
