"""Running an artifact: reading its Nodes-JSON, the fp16 simulator's two engines, HybridSession."""
from __future__ import annotations

from mrvl_convert.runtime.session import HybridSession, NodeArg
from mrvl_convert.runtime.simulator import CompiledSubgraph, Fp16RangeWarning, MrvlSimulator, RangeEvent

__all__ = ["CompiledSubgraph", "Fp16RangeWarning", "HybridSession", "MrvlSimulator", "NodeArg",
           "RangeEvent"]
