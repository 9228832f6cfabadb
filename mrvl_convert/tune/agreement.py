"""Top-1 agreement of an artifact with the fp32 model it came from: the measure
``--keep-fp16 auto --min-agreement`` chooses layers by.

Per output, the share of rows (every position but the last axis) whose argmax over the last
axis is the same in the artifact's run (the simulator, ``HybridSession``) and onnxruntime's run of
the float model; an output whose last axis has fewer than 2 entries has none. The model's
agreement is the smallest of its outputs'.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from mrvl_convert.runtime.session import HybridSession

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class Agreement:
    """Top-1 agreement per output (None: no last axis to take a top-1 over), the samples."""

    per_output: Dict[str, Optional[float]]
    samples: int

    @property
    def value(self) -> Optional[float]:
        """The smallest output agreement (None: no output has a top-1)."""
        values = [v for v in self.per_output.values() if v is not None]
        return min(values) if values else None


def top1_agreement(float_model: PathLike, artifact: PathLike,
                   feeds: Sequence[Mapping[str, np.ndarray]]) -> Agreement:
    """The artifact's top-1 agreement with ``float_model`` (run by onnxruntime) on ``feeds``."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    reference = ort.InferenceSession(str(float_model), options,
                                     providers=["CPUExecutionProvider"])
    names = [o.name for o in reference.get_outputs()]
    session = HybridSession(artifact, on_range_error="warn")
    agree: Counter = Counter()
    total: Counter = Counter()
    for feed in feeds:
        want = reference.run(names, dict(feed))
        got = session.run(names, dict(feed))
        for name, g, w in zip(names, got, want):
            g, w = np.asarray(g), np.asarray(w)
            if w.ndim == 0 or w.shape[-1] < 2:
                continue
            agree[name] += int((g.argmax(-1) == w.argmax(-1)).sum())
            total[name] += int(np.prod(w.shape[:-1]))
    per_output = {n: (agree[n] / total[n] if total[n] else None) for n in names}
    return Agreement(per_output, len(feeds))


def stage_counts(artifact: PathLike) -> Dict[str, int]:
    """How many stages of each kind (``mrvl``, ``cpu``) the artifact has."""
    kinds = [stage.kind for stage in HybridSession(artifact).stages]
    return {kind: kinds.count(kind) for kind in ("mrvl", "cpu")}


def describe(agreement: Optional[float], target: float, reached: bool) -> str:
    """One line's worth: the agreement reached against the target, plainly."""
    if agreement is None:
        return "no top-1 output to measure agreement on"
    verdict = "reached" if reached else "NOT reached"
    return f"top-1 agreement with fp32 {agreement:.4f}, target {target:g} {verdict}"


__all__: List[str] = ["Agreement", "describe", "stage_counts", "top1_agreement"]
