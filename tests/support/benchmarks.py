"""The benchmark scripts under ``benchmarks/`` (not a package: they run as scripts and import
each other by file name) as modules, for tests of their pieces that need no download."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def bench_module(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, imported with benchmarks/ on sys.path as the scripts expect."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)
