"""The fp16 floor of a verdict: what rounding every float tensor to fp16 costs the reference.

An error means little without its scale: an output off by 0.05 of its peak is a converter
defect in one model and all that fp16 can do in another (issue 43, finding 4). The floor is
the verdict's own reference (the model, or an int8 artifact's QDQ model) with every float
tensor rounded to fp16 where a node reads or writes it: each node's float inputs, weights and
results (``floor_model``; QuantizeLinear/DequantizeLinear and Cast left alone: their results
are rounded where a node reads them), a Conv and its BatchNormalization first folded into one
Conv as the device computes them (``floor_folds.py``), an additive attention mask's
finfo.min constant clamped to -32752 as the converter computes it (``floor_masks.py``) and
each two-input Max/Min as the device's lowering computes it, its gap rounded
(``floor_minmax.py``),
run by onnxruntime on the same inputs; shapes, indices and integers are never rounded
(``value_tensors.py``). Its error against the reference, per output, is what an fp16 device
costs that model whatever the converter does; a sum order or an fp16 accumulator may cost a
little more, so an artifact within ``report.FLOOR_MULTIPLE`` times the floor is called
fp16-sensitive (``--keep-fp32 auto`` keeps its costliest layers in fp32), one far above it a
converter defect.

- requires: the reference model (a copy is rounded; it is not changed) and the feeds;
- ensures: a ``Floor`` with each output's worst errors over the feeds, or its ``note`` saying
  why it could not be measured (verify's rewrite failing is never the verdict's failure).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.kernels.fp16 import round_to_fp16
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.floor_folds import fold_conv_batchnorms
from mrvl_convert.verify.floor_masks import clamp_floor_masks
from mrvl_convert.verify.floor_minmax import lower_minmax
from mrvl_convert.verify.kept_fp16 import topologically_sorted
from mrvl_convert.verify.metrics import Worst
from mrvl_convert.verify.reference import (load_model, reference_session, rewrite_label,
                                           run_reference)
from mrvl_convert.verify.value_tensors import never_rounded

# Not rounded as nodes: a Q/DQ node's scales and integers are no fp16 data (its float result is
# rounded where a node reads it); a Cast's result is its input's value, rounded where read (and
# the Cast pairs ``kept_fp16`` inserts are roundings already).
_SKIPPED = ("QuantizeLinear", "DequantizeLinear", "Cast")
_SUFFIX = "__floor16"


@dataclass
class Floor:
    """Each output's worst error over the feeds with every float tensor rounded to fp16."""

    outputs: Dict[str, Worst] = field(default_factory=dict)
    note: str = ""  # why it was not measured ('' when it was)


def floor_model(proto: onnx.ModelProto, outputs: Optional[Sequence[str]] = None,
                on_device: Optional[AbstractSet[str]] = None) -> onnx.ModelProto:
    """A copy of ``proto`` with every float tensor rounded to fp16 (module docstring): each
    float tensor a node reads goes through one Cast pair (made once, shared by its readers),
    each float weight is read as a rounded copy, each of ``outputs`` (default: the model's)
    is rounded; each Conv -> BatchNormalization pair first folded (``floor_folds.py``), each
    additive mask's constant clamped (``floor_masks.py``), each two-input Max/Min
    lowered (``floor_minmax.py``; only those in ``on_device``, the nodes the artifact runs
    on Mrvl, when given). Linear
    in the model's size (one pass over the nodes)."""
    copy = load_model(proto)
    name_nodes(copy)  # an unnamed node has the name the converter gave it (on_device's)
    fold_conv_batchnorms(copy)
    graph = copy.graph
    names = [o.name for o in graph.output] if outputs is None else outputs
    clamp_floor_masks(copy, names)  # finfo.min is -inf in fp16: NaN where the artifact has -32752
    protected = never_rounded(copy)
    inits = {t.name: t for t in graph.initializer}
    rounded: Dict[str, str] = {}
    added: List[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type in _SKIPPED:
            continue
        for k, name in enumerate(node.input):
            if name and name not in protected:
                node.input[k] = _rounded(name, inits, rounded, added, graph)
    for name in dict.fromkeys(names):
        if name not in protected:
            _round_output(graph, name, added)
    graph.node.extend(added)
    topologically_sorted(copy)
    # after the sort: the lowering's operand choice infers shapes, which needs the order
    if lower_minmax(copy, protected, on_device):  # no Max/Min layer: the gap rounds too
        topologically_sorted(copy)
    return copy


def _rounded(name: str, inits: Dict[str, onnx.TensorProto], rounded: Dict[str, str],
             added: List[onnx.NodeProto], graph: onnx.GraphProto) -> str:
    """The name of ``name`` rounded to fp16: a rounded copy of a float32 weight, a Cast pair
    of an activation; made once."""
    if name not in rounded:
        tensor = inits.get(name)
        target = name + _SUFFIX
        if tensor is not None:
            array = numpy_helper.to_array(tensor)
            if array.dtype != np.float32:
                return name
            graph.initializer.append(numpy_helper.from_array(
                round_to_fp16(np.ascontiguousarray(array))[0], target))
        else:
            added.extend(_pair(name, target))
        rounded[name] = target
    return rounded[name]


def _round_output(graph: onnx.GraphProto, name: str, added: List[onnx.NodeProto]) -> None:
    """The output ``name`` rounded: its producer writes ``name__floor32``, a Cast pair
    gives ``name`` (a reader's own Cast pair of it then rounds a rounded value: the same)."""
    producer = next((n for n in graph.node if name in n.output), None)
    if producer is None:  # an input or a weight passed through
        return
    raw = name + "__floor32"
    producer.output[list(producer.output).index(name)] = raw
    added.extend(_pair(raw, name))


def _pair(source: str, target: str) -> List[onnx.NodeProto]:
    # named from ``source``, which only this module makes (``__floor16``/``__floor32``
    # targets): ``kept_fp16`` names its pairs from their target, and a QDQ reference's output
    # it rounded is rounded here again (``logits__half`` twice: no model onnxruntime runs)
    half = source + _SUFFIX + "__half"
    return [helper.make_node("Cast", [source], [half], name=half, to=onnx.TensorProto.FLOAT16),
            helper.make_node("Cast", [half], [target], name=half + "__cast",
                             to=onnx.TensorProto.FLOAT)]


def fp16_floor(proto: onnx.ModelProto, label: str, outputs: Sequence[str],
               feeds: Sequence[Dict[str, np.ndarray]], want: Dict[str, List[np.ndarray]],
               log_severity: int = 3, on_device: Optional[AbstractSet[str]] = None) -> Floor:
    """The floor of ``outputs`` (their reference values ``want``, one per feed);
    ``on_device``: as ``floor_model``'s."""
    what = rewrite_label(label, "every float tensor rounded to fp16: the fp16 floor")
    try:
        rounded = floor_model(proto, outputs, on_device)
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
