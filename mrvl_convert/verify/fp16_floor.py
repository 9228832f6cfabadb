"""The fp16 floor of a verdict: what rounding every float tensor to fp16 costs the reference.

An error means little without its scale: an output off by 0.05 of its peak is a converter
defect in one model and all that fp16 can do in another (issue 43, finding 4). The floor is
the verdict's own reference (the model, or an int8 artifact's QDQ model) with every float
tensor rounded to fp16 where a node reads or writes it: each node's float inputs, weights and
results (``kept_fp16.round_groups``, one group per node; QuantizeLinear/DequantizeLinear left
alone: their scales and integers are no fp16 data, their float results are rounded where read),
run by onnxruntime on the same inputs; shapes, indices and integers are never rounded
(``value_tensors.py``). Its error against the reference, per output, is what an fp16 device
costs that model whatever the converter does; a sum order or an fp16 accumulator may cost a
little more, so an artifact within ``report.FLOOR_MULTIPLE`` times the floor is called fp16-sensitive
(``--keep-fp32 auto`` keeps its costliest layers in fp32), one far above it a converter defect.

- requires: the reference model (a copy is rounded; it is not changed) and the feeds;
- ensures: a ``Floor`` with each output's worst errors over the feeds, or its ``note`` saying
  why it could not be measured (verify's rewrite failing is never the verdict's failure).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence

import numpy as np
import onnx

from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.kept_fp16 import round_groups
from mrvl_convert.verify.metrics import Worst
from mrvl_convert.verify.reference import (load_model, reference_session, rewrite_label,
                                           run_reference)

_QDQ = ("QuantizeLinear", "DequantizeLinear")


@dataclass
class Floor:
    """Each output's worst error over the feeds with every float tensor rounded to fp16."""

    outputs: Dict[str, Worst] = field(default_factory=dict)
    note: str = ""  # why it was not measured ('' when it was)


def floor_model(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` with every float tensor rounded to fp16 (module docstring)."""
    copy = load_model(proto)
    name_nodes(copy)
    round_groups(copy, [[n.name] for n in copy.graph.node if n.op_type not in _QDQ])
    return copy


def fp16_floor(proto: onnx.ModelProto, label: str, outputs: Sequence[str],
               feeds: Sequence[Dict[str, np.ndarray]], want: Dict[str, List[np.ndarray]],
               log_severity: int = 3) -> Floor:
    """The floor of ``outputs`` (their reference values ``want``, one per feed)."""
    what = rewrite_label(label, "every float tensor rounded to fp16: the fp16 floor")
    try:
        rounded = floor_model(proto)
        session = reference_session(rounded, [TensorSpec(n, (), "float32") for n in outputs],
                                    log_severity, what)
        floor = Floor({name: Worst() for name in outputs})
        for k, feed in enumerate(feeds):
            for name, value in zip(outputs, run_reference(session, list(outputs), feed,
                                                          rounded, what)):
                if np.issubdtype(np.asarray(value).dtype, np.floating):
                    floor.outputs[name].add(np.asarray(value), want[name][k])
        return floor
    except MrvlConvertError as exc:
        return Floor(note=f"not measured: {' '.join(str(exc).split())[:300]}")
