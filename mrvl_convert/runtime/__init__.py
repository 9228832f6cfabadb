"""Running converted models: the fp16 Mrvl simulator, HybridSession, and the fp32 comparison.

Exports are loaded on first use: the layer catalogue (``mrvl_convert.layers``) imports the
simulator's building blocks from this package, and the simulator imports the catalogue.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "HybridSession": "session", "NodeArg": "session",
    "CompiledSubgraph": "simulator", "Fp16RangeWarning": "simulator",
    "MrvlSimulator": "simulator", "RangeEvent": "simulator",
    "DEFAULT_TOLERANCE": "tolerances", "Tolerance": "tolerances", "Tolerances": "tolerances",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
