"""A Mrvl stage whose batch runs in chunks: its Nodes-JSON is compiled at batch b and the stage's
batch N = runs x b is fed to it ``runs`` times, a chunk of consecutive samples (axis 0) at a
time, as the board runs it (the manifest's ``runs``: DPDK's ``rte_ml_op.nb_batches`` or the
application, ``rules/batch_axis.py``).

- requires: a ``CompiledSubgraph`` whose every input and output has axis 0 b, and ``runs`` >= 2;
  the converter writes ``runs`` only for a stage whose every op computes each sample on its own;
- ensures: ``execute`` takes and gives the stage's tensors at batch N: the outputs of the runs,
  in order, concatenated along axis 0 (what one run on the whole batch computes, sample by
  sample); a trace holds each layer's outputs of all runs concatenated along the layer's
  physical axis 0 (the batch: a per-sample stage never moves it); range events of every run.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.runtime.simulator import CompiledSubgraph, RangeEvent

Trace = List[Tuple[LayerSpec, np.ndarray]]


class ChunkedSubgraph:
    """``compiled`` run ``runs`` times per call; everything else is the compiled subgraph's."""

    def __init__(self, compiled: CompiledSubgraph, runs: int) -> None:
        self.compiled = compiled
        self.runs = runs
        self.output_shapes = [(shape[0] * runs, *shape[1:]) for shape in compiled.output_shapes]

    def __getattr__(self, name: str) -> Any:
        # steps, inputs, layers, heads...: the compiled subgraph's (verify reads them)
        return getattr(self.compiled, name)

    def execute(self, inputs: Sequence[Any], events: List[RangeEvent], *,
                on_range_error: Optional[str] = None,
                trace: Optional[Trace] = None) -> List[np.ndarray]:
        """``CompiledSubgraph.execute`` on the whole batch: inputs in arg_nodes order."""
        chunks = [np.split(np.asarray(value), self.runs, axis=0) for value in inputs]
        outputs, traces = [], []
        for k in range(self.runs):
            layers: Optional[Trace] = None if trace is None else []
            outputs.append(self.compiled.execute([c[k] for c in chunks], events,
                                                 on_range_error=on_range_error, trace=layers))
            traces.append(layers)
        if trace is not None:
            for i, (spec, _) in enumerate(traces[0]):
                trace.append((spec, np.concatenate([t[i][1] for t in traces], axis=0)))
        return [np.concatenate([run[j] for run in outputs], axis=0)
                for j in range(len(outputs[0]))]

    def run(self, inputs: Sequence[Any], *, on_range_error: Optional[str] = None
            ) -> List[np.ndarray]:
        events: List[RangeEvent] = []
        try:
            return self.execute(inputs, events, on_range_error=on_range_error)
        finally:
            self.compiled.last_range_events = events
