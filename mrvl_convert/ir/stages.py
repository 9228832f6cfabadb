"""What partition hands to lowering and emit: units, stages in run order, and the plan."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import onnx_graphsurgeon as gs

from mrvl_convert.ir.match import Composite


@dataclass
class Unit:
    """A composite (several nodes, one Mrvl layer) or a lone node bound for CPU."""
    index: int
    nodes: List[gs.Node]
    composite: Optional[Composite]
    preds: List[int] = field(default_factory=list)
    heavy: bool = False     # a compute-heavy layer (Conv2D, FC...): what makes a region worth it


@dataclass
class Stage:
    kind: str               # "mrvl" | "cpu"
    name: str
    units: List[Unit]
    inputs: List[gs.Tensor]
    outputs: List[gs.Tensor]
    opset: Optional[int] = None   # the model's default-domain opset (defaults of some ops)

    @property
    def nodes(self) -> List[gs.Node]:
        return [n for u in self.units for n in u.nodes]


@dataclass
class Plan:
    policy: str
    stages: List[Stage]
    demoted: Dict[str, str]   # node name -> why its composite went back to CPU

    def stage_of(self) -> Dict[str, Stage]:
        return {n.name: s for s in self.stages for n in s.nodes}
