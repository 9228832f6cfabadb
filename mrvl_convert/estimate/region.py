"""The estimated accelerator time of a candidate Mrvl region, from its ONNX nodes (an ESTIMATE).

The partitioner weighs regions before anything is lowered, so this reads the ONNX graph, not a
Nodes-JSON: the same roofline as ``cost.py`` (compute at the profile's rate and efficiency, the
weights streamed from DDR once, a fixed overhead per layer), with each MAC-heavy node taken as
one layer and every other node as vector work on its output.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape
from mrvl_convert.core.macs import node_macs
from mrvl_convert.estimate.profile import HardwareProfile

_LAYER_OF = {"Conv": "Conv2D", "ConvTranspose": "Conv2DTranspose", "Gemm": "FC", "MatMul": "FC"}


def node_cycles(node: gs.Node, profile: HardwareProfile) -> float:
    """Estimated cycles of one ONNX node on the accelerator, at the profile's default tiles."""
    tiles = profile.tiles
    weights = sum(math.prod(t.shape) for t in node.inputs
                  if isinstance(t, gs.Constant) and t.shape is not None)
    memory = weights * profile.weight_bytes_per_element / profile.ddr_bytes_per_cycle
    macs = node_macs(node)
    if macs:
        kind = _LAYER_OF.get(node.op, "Conv2D")
        compute = macs / (profile.macs_per_cycle_per_tile * tiles * profile.efficiency_of(kind))
        return max(compute, memory) + profile.layer_overhead_cycles
    out = static_shape(node.outputs[0]) if node.outputs else None
    elements = math.prod(out) if out else 0
    compute = elements / (profile.vector_ops_per_cycle_per_tile * tiles
                          * profile.efficiency_of("default_vector"))
    return max(compute, memory)


def region_weight(profile: HardwareProfile) -> Callable[[Iterable[gs.Node]], float]:
    """A ranking for ``partition(max_subgraphs=...)``: a region's estimated cycles."""
    def weight(nodes: Iterable[gs.Node]) -> float:
        return sum(node_cycles(n, profile) for n in nodes)
    return weight
