"""Whether an fp16 overflow is the model's own: the float32 values of the nodes whose layers
overflowed.

A layer whose fp16 output holds inf (a simulator range event) may overflow because the model's
own value there exceeds fp16's largest, 65504 (a T5 encoder's RMSNorm squares its residual
stream: 6e5 in float32), or because the converter's layers compute something the model does not
(a decomposition's partial result). Only the first is the model's: no fp16 device computes it,
whatever the converter does, and the remedy is to keep those nodes in fp32 (``--keep-fp32``) or
to rescale the model. An output that is inf or NaN after such an overflow, and an fp16 floor
that is not finite, are then the model's, not a converter defect.

- requires: the reference model (a copy is run; it is not changed), the range events' source
  nodes and the feeds;
- ensures: ``Overflow.tensors``, each output tensor of those nodes whose largest float32 |value|
  over the feeds exceeds 65504, in the model's node order, with that value; ``Overflow.nodes``,
  the nodes writing or reading them (what ``--keep-fp32 auto`` keeps first); ``line()`` says so
  in one sentence ('' when none does); a reference that cannot be run gives no tensor (the
  verdict never fails because of this diagnostic); ``merged_events``, verify's range events
  one line per layer over the samples (the sample where most values left the range, and in how
  many samples any did).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import onnx

from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.reference import load_model, reference_session, run_reference

FP16_MAX = 65504.0


@dataclass
class Overflow:
    """The tensors of the model that exceed fp16's range in float32, with their peak |value|."""

    tensors: List[Tuple[str, float]] = field(default_factory=list)
    # the nodes writing them and those reading them: an fp16 layer reading such a value
    # reads inf, so keeping a value in fp32 means keeping its readers too
    nodes: List[str] = field(default_factory=list)

    def line(self) -> str:
        if not self.tensors:
            return ""
        (first, peak), more = self.tensors[0], len(self.tensors) - 1
        others = f" (and {more} more tensor(s) beyond it)" if more else ""
        return (f"fp16 overflows in the model itself: {first} reaches {peak:.3g} in float32, "
                f"beyond fp16's largest value 65504{others}; not a converter defect: keep "
                "those nodes in fp32 on the CPU (--keep-fp32 NODE or auto) or rescale the model")


def model_overflow(model: object, source_nodes: Sequence[str],
                   feeds: Sequence[Dict[str, np.ndarray]], log_severity: int = 3) -> Overflow:
    """The float32 outputs of ``source_nodes`` (the range events') beyond 65504 over ``feeds``,
    in the model's node order (module docstring)."""
    if not source_nodes or not feeds:
        return Overflow()
    proto = load_model(model)
    wanted = set(source_nodes)
    tensors = [(node.name, out) for node in proto.graph.node if node.name in wanted
               for out in node.output[:1] if out]
    if not tensors:
        return Overflow()
    peaks = peaks_of(proto, [t for _, t in tensors], feeds, log_severity)
    over = [(node, tensor) for node, tensor in tensors if peaks.get(tensor, 0.0) > FP16_MAX]
    read = {tensor for _, tensor in over}
    readers = [n.name for n in proto.graph.node if n.name and read & set(n.input)]
    return Overflow([(tensor, peaks[tensor]) for _, tensor in over],
                    list(dict.fromkeys([n for n, _ in over] + readers)))


def peaks_of(proto: onnx.ModelProto, names: List[str], feeds: Sequence[Dict[str, np.ndarray]],
             log_severity: int = 3) -> Dict[str, float]:
    """The largest finite float32 |value| of each tensor of ``names`` over ``feeds`` ({} when
    the model cannot be run)."""
    try:
        session = reference_session(proto, [TensorSpec(n, (), "float32") for n in names],
                                    log_severity)
        peaks: Dict[str, float] = {}
        for feed in feeds:
            for name, value in zip(names, run_reference(session, names, feed, proto)):
                value = np.asarray(value)
                if np.issubdtype(value.dtype, np.floating) and value.size:
                    # an inf of the model's own is fp16's inf too: only finite values count
                    peak = float(np.abs(value[np.isfinite(value)]).max(initial=0.0))
                    peaks[name] = max(peaks.get(name, 0.0), peak)
        return peaks
    except MrvlConvertError:
        return {}


def merged_events(per_sample: Sequence[Sequence[Any]]) -> List[str]:
    """One line per layer whose fp16 output held inf or NaN over the samples (each sample's
    ``RangeEvent`` list): the sample where it held most, and in how many samples it did. A
    layer overflowing in every one of 8 samples is one line, not 8."""
    worst: Dict[str, Any] = {}
    samples: Dict[str, int] = {}
    for events in per_sample:
        for layer in dict.fromkeys(e.layer for e in events):
            samples[layer] = samples.get(layer, 0) + 1
        for event in events:
            kept = worst.get(event.layer)
            if kept is None or event.n_inf + event.n_nan > kept.n_inf + kept.n_nan:
                worst[event.layer] = event
    total = len(per_sample)
    return [event.describe() + (f" (in {samples[layer]} of {total} samples; the most shown)"
                                if total > 1 else "") for layer, event in worst.items()]
