"""Running converted models: the fp16 Mrvl simulator, HybridSession, and the fp32 comparison.

``compare`` / ``verify_cli`` import onnx and onnxruntime; the simulator itself needs only numpy.
"""
from .session import HybridSession, NodeArg
from .simulator import CompiledSubgraph, Fp16RangeWarning, MrvlSimulator, RangeEvent
from .tolerances import DEFAULT_TOLERANCE, Tolerance, Tolerances

__all__ = [
    "CompiledSubgraph", "DEFAULT_TOLERANCE", "Fp16RangeWarning", "HybridSession",
    "MrvlSimulator", "NodeArg", "RangeEvent", "Tolerance", "Tolerances",
]
