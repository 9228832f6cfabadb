"""Top-1 agreement of an artifact with the fp32 model it came from: the measure
``--keep-fp16 auto --min-agreement`` chooses layers by.

Per output, the share of rows (every position but the last axis) whose argmax over the last
axis is the same in the artifact's run (the simulator, ``HybridSession``) and onnxruntime's run of
the float model; an output whose last axis has fewer than 2 entries has none. The model's
agreement is the smallest of its outputs'. Beside it, the SNR of all outputs together against
the fp32 model's, which tells apart artifacts whose agreement over a few samples is tied.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from mrvl_convert.runtime.session import HybridSession

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class Agreement:
    """Top-1 agreement per output (None: no last axis to take a top-1 over), the samples, and
    the SNR (dB) of every output together against the fp32 model's (None: no error at all)."""

    per_output: Dict[str, Optional[float]]
    samples: int
    snr_db: Optional[float] = None

    @property
    def value(self) -> Optional[float]:
        """The smallest output agreement (None: no output has a top-1)."""
        values = [v for v in self.per_output.values() if v is not None]
        return min(values) if values else None

    def key(self) -> Tuple[float, float]:
        """What a better artifact has more of: agreement first, the SNR to tell equal ones
        apart (a few dozen samples leave many agreements tied)."""
        snr = float("inf") if self.snr_db is None else self.snr_db
        return (-1.0 if self.value is None else self.value, snr)


def reference_outputs(float_model: PathLike, feeds: Sequence[Mapping[str, np.ndarray]]
                      ) -> Tuple[List[str], List[List[np.ndarray]]]:
    """The float model's output names and its outputs on each feed (run by onnxruntime):
    computed once, measured against by every trial artifact."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    reference = ort.InferenceSession(str(float_model), options,
                                     providers=["CPUExecutionProvider"])
    names = [o.name for o in reference.get_outputs()]
    return names, [reference.run(names, dict(feed)) for feed in feeds]


def measure(artifact: PathLike, feeds: Sequence[Mapping[str, np.ndarray]],
            reference: Tuple[List[str], List[List[np.ndarray]]]) -> Agreement:
    """The artifact's top-1 agreement and output SNR against ``reference_outputs``."""
    names, wanted = reference
    session = HybridSession(artifact, on_range_error="warn")
    agree: Counter = Counter()
    total: Counter = Counter()
    signal = noise = 0.0
    for feed, want in zip(feeds, wanted):
        got = session.run(names, dict(feed))
        for name, g, w in zip(names, got, want):
            g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
            signal += float((w * w).sum())
            noise += float(((g - w) ** 2).sum())
            if w.ndim == 0 or w.shape[-1] < 2:
                continue
            agree[name] += int((g.argmax(-1) == w.argmax(-1)).sum())
            total[name] += int(np.prod(w.shape[:-1]))
    per_output = {n: (agree[n] / total[n] if total[n] else None) for n in names}
    snr = None if noise == 0 else 10 * math.log10(max(signal, 1e-300) / noise)
    return Agreement(per_output, len(feeds), snr)


def top1_agreement(float_model: PathLike, artifact: PathLike,
                   feeds: Sequence[Mapping[str, np.ndarray]]) -> Agreement:
    """The artifact's top-1 agreement with ``float_model`` (run by onnxruntime) on ``feeds``."""
    return measure(artifact, feeds, reference_outputs(float_model, feeds))


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


__all__: List[str] = ["Agreement", "describe", "measure", "reference_outputs", "stage_counts",
                       "top1_agreement"]
