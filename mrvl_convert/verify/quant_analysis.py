"""Per-layer quantization analysis of an int8 artifact against the float model it came from.

What Hailo's layer analysis, RKNN's ``accuracy_analysis`` and TIDL's layer traces give: for every
Mrvl layer, the SNR (dB) and cosine of its result against the fp32 model's tensor, twice:

- **accumulated**: the hybrid's own run, so the layer's figure holds every error before it;
- **isolated**: the layer's compiled kernel run alone on the fp32 reference of its inputs,
  quantized at the scale its input has in the artifact, so the error a layer adds is told apart
  from the error it inherits.

Collect, then judge (Polygraphy's way): ``collect`` runs both sides and folds every layer's sums
over the samples; ``QuantAnalysis`` holds the rows and says which layers are below a threshold.

Mapping a layer to a tensor of the float model: a layer's ``source_nodes`` name the QDQ model's
nodes. Its op nodes (Conv, Relu, ...) keep the float model's node names (``quantize_static``
copies them), so the layer's tensor is the output of the last of them, in node order, in the
float model put through the rewrites the layers saw (``float_form.py``: ``quantize_int8``'s
BatchNormalization folding and PRelu decomposition, then the converter's canonicalization): a
Conv whose BatchNormalization was folded into it writes the BN's output there, so the folded
Conv2D is compared with the tensor after the BatchNormalization, never with the Conv's raw
output; the steps of a decomposed PRelu and a Sum's partial sums have tensors only that form
has, and take their reference from it (exact rewrites). Every other tensor's
reference is the float model's own. A ``quant`` layer (a region edge) has only a
QuantizeLinear or DequantizeLinear, which ``quantize_static`` names ``<tensor>_QuantizeLinear``
/ ``<tensor>_DequantizeLinear`` after the float tensor it quantizes. A layer neither way maps
(a converter's own layout_transform, a float model whose node names differ from the QDQ
model's) gets no row, or a row saying so.

Comparisons are made in the simulator's physical layout (NHWC), the fp32 reference being
transposed to it: SNR and cosine are sums over elements, so the layout does not change them.
Layers that only move bytes (reshape family, layout_transform) and ``quant`` layers take their
reference from their input's, through their own kernel (which moves bytes exactly).

The figures are ``metrics.py``'s, the table and its verdicts ``quant_report.py``'s, the
reference runs ``reference.py``'s.

- requires: the float model the QDQ model was quantized from and the int8 artifact made of it;
- ensures: a ``QuantAnalysis`` with a row per layer that has ONNX source nodes (in run order),
  the layers that map to no float tensor listed in ``unmapped``; a float model whose inputs are
  not the artifact's raises ``ShapeError``.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import onnx

from mrvl_convert.core.artifact import first_value
from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.kernels.fp16 import round_to_fp16
from mrvl_convert.layers.qnn.kernels import dequantize, quantize
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.runtime.simulator import Fp16RangeWarning
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.float_form import equalized, mapped_form
from mrvl_convert.verify.layer_compare import RESHAPE_LAYERS
from mrvl_convert.verify.metrics import Sums, cosine, snr_db
from mrvl_convert.verify.quant_report import DEFAULT_THRESHOLD_DB, LayerQuality, QuantAnalysis
from mrvl_convert.verify.reference import (check_model_inputs, load_model, model_label,
                                           reference_session, run_reference, sample_feeds)
from mrvl_convert.frontend.vocabulary import input_kinds

# Layers that excluding their op node from quantization gives back to float: the candidates of
# ``--keep-fp16 auto``. Their weights stay float; an excluded Add or pool still sits between
# the DequantizeLinear and QuantizeLinear its quantized neighbours put there, so it stays int8.
KEEPABLE_LAYERS = frozenset({"Conv2D", "FC"})
_BYTE_MOVERS = RESHAPE_LAYERS | {"layout_transform"}
_QDQ_OPS = ("_QuantizeLinear", "_DequantizeLinear")
Key = Tuple[str, int]  # (stage name, node index in its Nodes-JSON)
Feed = Dict[str, np.ndarray]


# ------------------------------------------------------------------------------- collecting
@dataclass
class _Layer:
    """One traced layer: what is needed to run it alone and to judge it."""

    key: Key
    step: Any  # program.Step
    row: Optional[LayerQuality]
    acc: Sums = field(default_factory=Sums)
    iso: Sums = field(default_factory=Sums)
    iso_issue: str = ""


def analyze_quantization(float_model: "str | os.PathLike[str] | onnx.ModelProto",
                         artifact_dir: "str | os.PathLike[str]",
                         inputs: Union[None, Mapping[str, Any], Sequence[Mapping[str, Any]]]
                         = None, *, threshold_db: float = DEFAULT_THRESHOLD_DB, seed: int = 0,
                         samples: int = 1, gemm: str = "numpy") -> QuantAnalysis:
    """Every Mrvl layer of the (int8) artifact against the float model's tensors (module
    docstring). ``inputs``: a feed dict, a list of them, or None for ``samples`` seeded random
    feeds."""
    session = HybridSession(artifact_dir, on_range_error="warn", gemm=gemm)
    proto = load_model(float_model)
    check_model_inputs(proto, session, model_label(float_model))
    name_nodes(proto)  # as the converter named the QDQ model's nodes, so names meet
    form = mapped_form(proto, session)  # what the layers' source nodes name (float_form.py)
    feeds = sample_feeds(session, inputs, seed, samples, input_kinds(proto))
    layers, unmapped = _plan(session, form)
    tensors = sorted({r.tensor for lay in layers for r in [lay.row] if r and r.tensor})
    names = _tensor_names(form)
    inputs_of = {_boundary_tensor(t.name, names) for s in session.stages if s.kind == "mrvl"
                 for t in s.inputs}
    model_inputs = {i.name for i in proto.graph.input}
    wanted = sorted((set(tensors) | (inputs_of & names)) - model_inputs)
    # After --equalize the float model's own tensors between a pair are not the layers' scale.
    references = _references(form if equalized(session) else proto, form, wanted)
    events: List[str] = []
    for feed in feeds:
        refs = dict(feed)
        for reference, model, outputs in references:
            refs.update(zip(outputs, run_reference(reference, outputs, feed, model)))
        _fold(session, layers, feed, refs, events)
    rows = []
    for lay in layers:
        if lay.row is None:
            continue
        row = lay.row
        if lay.acc.ref2 or lay.acc.err2:
            row.snr_db, row.cosine = snr_db(lay.acc), cosine(lay.acc)
        if lay.iso.ref2 or lay.iso.err2:
            row.isolated_snr_db, row.isolated_cosine = snr_db(lay.iso), cosine(lay.iso)
        elif lay.iso_issue and not row.note:
            row.note = f"isolated: {lay.iso_issue}"
        rows.append(row)
    return QuantAnalysis(rows, _sample_count(feeds, session), threshold_db, unmapped,
                         list(dict.fromkeys(events)))


def _sample_count(feeds: Sequence[Feed], session: HybridSession) -> int:
    """Samples, not feeds: a feed of a batch-4 model holds four."""
    first = session.input_specs[0].name if session.input_specs else None
    return sum(int(np.shape(feed[first])[0]) if first in feed and np.ndim(feed[first]) else 1
               for feed in feeds)


def _references(proto: onnx.ModelProto, form: onnx.ModelProto, wanted: Sequence[str]
                ) -> List[Tuple[Any, onnx.ModelProto, List[str]]]:
    """The sessions that give the ``wanted`` tensors: the float model itself for every tensor
    it has (a folded Conv's is the BatchNormalization's output there), its quantized form
    only for the tensors a rewrite added (a decomposed PRelu's steps), exact in float32."""
    own = _tensor_names(proto)
    groups = [(proto, [t for t in wanted if t in own]),
              (form, [t for t in wanted if t not in own])]
    return [(reference_session(model, [TensorSpec(t, (), "float32") for t in names], 3),
             model, names) for model, names in groups if names or model is proto]


def _tensor_names(proto: onnx.ModelProto) -> set:
    names = {i.name for i in proto.graph.input}
    for node in proto.graph.node:
        names.update(o for o in node.output if o)
    return names


def _plan(session: HybridSession, proto: onnx.ModelProto) -> Tuple[List[_Layer], List[str]]:
    """Every layer of every Mrvl stage, in run order, with its row (None: no ONNX source, a
    layer the converter added) and the layers that map to no float tensor."""
    nodes = list(proto.graph.node)
    position = {n.name: k for k, n in enumerate(nodes)}
    tensors = _tensor_names(proto)
    layers, unmapped = [], []
    for stage in session.stages:
        if stage.kind != "mrvl":
            continue
        for step in stage.runner.steps:
            spec = step.spec
            row = None
            if spec.source_nodes:
                ops = sorted((n for n in spec.source_nodes if n in position), key=position.get)
                tensor = nodes[position[ops[-1]]].output[0] if ops else \
                    _qdq_tensor(spec.source_nodes, tensors)
                row = LayerQuality(stage.name, spec.name, spec.layer_name, _dtype(spec),
                                   tensor or "", ops)
                if not tensor:
                    row.note = "not mapped to a tensor of the float model"
                    unmapped.append(spec.name)
            layers.append(_Layer((stage.name, spec.index), step, row))
    return layers, unmapped


def _qdq_tensor(sources: Sequence[str], tensors: set) -> str:
    """The float tensor a region edge's QuantizeLinear/DequantizeLinear is named after."""
    for name in sources:
        for suffix in _QDQ_OPS:
            if name.endswith(suffix) and name[:-len(suffix)] in tensors:
                return name[:-len(suffix)]
    return ""


def _boundary_tensor(name: str, tensors: Any) -> str:
    """The float tensor a stage-boundary tensor of the QDQ model is: itself, or the tensor a
    QuantizeLinear / DequantizeLinear output is named after (``<tensor>_QuantizeLinear_Output``,
    ``quantize_static``'s naming)."""
    if name in tensors:
        return name
    for suffix in _QDQ_OPS:
        base = name[:-len(suffix + "_Output")] if name.endswith(suffix + "_Output") else ""
        if base in tensors:
            return base
    return name


def _consumer_scale(steps: Sequence[Any], index: int) -> Optional[float]:
    """The int8 scale of a stage's int8 input, as the first layer that reads it states it
    (through layers that move or select values, which state none)."""
    for step in steps:
        if index not in step.inputs:
            continue
        spec = step.spec
        key = "input_scale"
        if spec.layer_name == "Sum2D":
            key = "lhs_input_scale" if step.inputs.index(index) == 0 else "rhs_input_scale"
        value = _scale_attr(spec, key)
        if value is None and spec.layer_name in _BYTE_MOVERS | {"Maxpool2D"}:
            value = _consumer_scale(steps, step.node)
        if value is not None:
            return value
    return None


def _dtype(spec: Any) -> str:
    return str(first_value(spec.attrs.get("dtype", ["float32"])))


def _scale_attr(spec: Any, key: str) -> Optional[float]:
    value = first_value(spec.attrs.get(key))
    return None if value is None else float(value)


def _fold(session: HybridSession, layers: List[_Layer], feed: Feed,
          refs: Dict[str, np.ndarray], events: List[str]) -> None:
    """One sample: the hybrid's trace and every layer run alone, folded into the sums."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Fp16RangeWarning)  # recorded instead
        _, trace = session.run_layers(feed)
    events += [e.describe() for e in session.last_range_events]
    traced = {(t.stage, t.spec.index): t.value for t in trace}
    ref: Dict[Key, Optional[np.ndarray]] = {}     # fp32 reference, physical layout
    scale: Dict[Key, Optional[float]] = {}        # int8 scale of the layer's output
    for stage in session.stages:
        if stage.kind != "mrvl":
            continue
        for node in stage.runner.inputs:
            key = (stage.name, node.index)
            int8 = next(t for t in stage.inputs if t.name == node.name).dtype == "int8"
            scale[key] = _consumer_scale(stage.runner.steps, node.index) if int8 else None
            ref[key] = refs.get(_boundary_tensor(node.name, refs)) \
                if scale[key] is not None or not int8 else None
    for lay in layers:
        stage, spec = lay.key[0], lay.step.spec
        # Only a layer's first output has a reference (the trace keeps only that one), so an
        # input read from another output of a Split-like layer has none.
        slots = lay.step.slots or (0,) * len(lay.step.inputs)
        ins = [(stage, i) if slot == 0 else (stage, -1) for i, slot in zip(lay.step.inputs, slots)]
        out_scale = _output_scale(spec, [scale.get(k) for k in ins])
        scale[lay.key] = out_scale
        ref[lay.key] = _reference(lay, [ref.get(k) for k in ins], refs)
        if lay.row is None or ref[lay.key] is None:
            continue
        want = ref[lay.key]
        got = traced[lay.key]
        got = got[0] if isinstance(got, tuple) else got
        if got.shape != want.shape:
            lay.row.note = f"layout gives {list(got.shape)}, the float tensor {list(want.shape)}"
            continue
        lay.acc.add(_real(got, out_scale), want)
        alone = _isolated(lay, [(ref.get(k), scale.get(k)) for k in ins])
        if alone is not None:
            lay.iso.add(_real(alone, out_scale), want)


def _output_scale(spec: Any, in_scales: List[Optional[float]]) -> Optional[float]:
    """The int8 scale of a layer's output: its own output_scale, or (int8 layers that move or
    select values) its input's; None for a float output."""
    if _dtype(spec) != "int8":
        return None
    own = _scale_attr(spec, "output_scale")
    return own if own is not None else (in_scales[0] if in_scales else None)


def _real(value: np.ndarray, scale: Optional[float]) -> np.ndarray:
    return value if scale is None else dequantize(value, scale)


def _reference(lay: _Layer, inputs: List[Optional[np.ndarray]],
               refs: Dict[str, np.ndarray]) -> Optional[np.ndarray]:
    """The fp32 reference of a layer's output in its physical layout."""
    spec = lay.step.spec
    if spec.layer_name == "quant" or spec.layer_name in _BYTE_MOVERS:
        if inputs and all(x is not None for x in inputs):
            return inputs[0] if spec.layer_name == "quant" else lay.step.kernel.run(*inputs)
    if lay.row is None or not lay.row.tensor or lay.row.tensor not in refs:
        return None
    value = np.asarray(refs[lay.row.tensor], dtype=np.float32)
    layout = spec.attrs.get("out_layout", spec.attrs.get("dst_layout", ["NHWC"]))
    if value.ndim == 4 and first_value(layout) == "NHWC":
        value = value.transpose(0, 2, 3, 1)
    if value.shape != tuple(spec.shape):
        lay.row.note = (f"not compared: the float tensor is {list(refs[lay.row.tensor].shape)}, "
                        f"the layer gives {list(spec.shape)}")
        return None
    return np.ascontiguousarray(value)


def _isolated(lay: _Layer, inputs: List[Tuple[Optional[np.ndarray], Optional[float]]]
              ) -> Optional[np.ndarray]:
    """The layer's kernel alone on the fp32 references of its inputs, quantized at their int8
    scale (float inputs rounded to float16, as the simulator hands them on)."""
    if any(value is None for value, _ in inputs):
        lay.iso_issue = "an input has no fp32 reference"
        return None
    feeds = []
    for value, in_scale in inputs:
        if in_scale is not None:
            feeds.append(quantize(value, in_scale))
        elif lay.step.spec.layer_name == "quant" and _dtype(lay.step.spec) == "int8":
            feeds.append(np.array(value, dtype=np.float32))  # quantized from float32 directly
        else:
            feeds.append(round_to_fp16(np.array(value, dtype=np.float32), inplace=True)[0])
    with np.errstate(over="ignore", invalid="ignore"):
        out = lay.step.kernel.run(*feeds)
        if isinstance(out, tuple):
            lay.iso_issue = "a layer with several outputs"
            return None
        if not lay.step.kernel.exact:
            out = round_to_fp16(out, inplace=True)[0]
    return out
