"""fp16 sensitivity: which Mrvl layers of an fp16 artifact cost the most accuracy, and why.

The same per-layer figures the int8 analysis gives (``quant_analysis.analyze_quantization``,
reused as it is: on a float artifact every layer is fp16 and no int8 scale is involved), for
every Mrvl layer against the float model's tensor it stands for:

- **accumulated**: the hybrid's own run, every error before the layer included;
- **isolated**: the layer's compiled kernel alone on the fp32 references of its inputs (rounded
  to fp16, as the simulator hands them on): the error the layer adds;

plus a third figure, the **weights alone**: the float model on fp32 onnxruntime with only the
initializers this layer's op nodes read rounded to fp16 (all arithmetic in fp32), compared at
the layer's tensor and at the model outputs. It tells a layer whose fp16 weights cost accuracy
(large weights of opposite sign that cancel, a bias far larger than the product it is added
to) from one whose activations or arithmetic do, and ranks the layers by what their weights
cost the outputs: ``costliest``. A Conv with a BatchNormalization folded in has its fold rounded
once, as the artifact holds it (``fp16_fold.py``); another layer made of several weighted nodes
has each node's initializers rounded apart, where the artifact rounds their fold once: its
figure is then an estimate of the same order, and its row says so.

The auto remedy (``tune/keep_fp32.py``) keeps layers in fp32 on the CPU in ``candidates``'
order: first the layers whose weights cost the outputs most (lowest output SNR, finite),
then the other layers whose isolated SNR is below the threshold, worst first.

- requires: the float model and the fp16 artifact converted from it;
- ensures: an ``Fp16Analysis``: the per-layer rows (``QuantAnalysis``), a ``WeightRounding``
  per layer whose op nodes read float initializers, one onnxruntime session per such layer.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import numpy_helper

from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.frontend.opset_upgrade import constants_as_initializers
from mrvl_convert.kernels.fp16 import round_to_fp16
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.fp16_fold import round_folded
from mrvl_convert.verify.metrics import Sums, Worst, json_snr, snr_db
from mrvl_convert.verify.quant_analysis import analyze_quantization
from mrvl_convert.verify.quant_report import DEFAULT_THRESHOLD_DB, LayerQuality, QuantAnalysis
from mrvl_convert.verify.report import aligned_lines
from mrvl_convert.verify.reference import (load_model, reference_session, run_reference,
                                           sample_feeds)
from mrvl_convert.frontend.vocabulary import input_kinds

Feed = Dict[str, np.ndarray]
_FLOAT = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE}


@dataclass
class WeightRounding:
    """One layer's weights rounded alone: at its own tensor and at the worst model output."""

    layer: str
    initializers: List[str]
    snr_db: Optional[float] = None           # the layer's tensor
    output_snr_db: Optional[float] = None    # the worst model output
    output_max_rel: Optional[float] = None   # its max|err| / max|fp32|, worst sample
    note: str = ""


@dataclass
class Fp16Analysis:
    """The per-layer rows (accumulated and isolated) and each layer's weights-alone figures."""

    layers: QuantAnalysis
    weights: Dict[str, WeightRounding] = field(default_factory=dict)

    @property
    def costliest(self) -> List[LayerQuality]:
        """Layers whose fp16 weights cost the outputs anything, most first (lowest SNR)."""
        rows = [r for r in self.layers.rows if _finite(self._output_snr(r))]
        return sorted(rows, key=self._output_snr)

    def candidates(self) -> List[LayerQuality]:
        """What keeping in fp32 should try, in order (module docstring)."""
        order = self.costliest + self.layers.below_isolated
        seen: set = set()
        return [r for r in order if not (r.layer in seen or seen.add(r.layer))]

    def _output_snr(self, row: LayerQuality) -> Optional[float]:
        figures = self.weights.get(row.layer)
        return None if figures is None else figures.output_snr_db

    def to_dict(self) -> Dict[str, Any]:
        data = self.layers.to_dict()
        data["precision"] = "fp16"
        data["costliest"] = [r.layer for r in self.costliest]
        data["weights"] = [_json(w) for w in self.weights.values()]
        return data

    def format_table(self) -> str:
        header = ("layer", "kind", "tensor", "SNR dB", "isol. SNR dB", "weights SNR dB",
                  "weights->out SNR dB", "")
        text = aligned_lines(header, [self._cells(r) for r in self.layers.rows], rule_last=False)
        text.append(self.verdict())
        return "\n".join(text)

    def verdict(self) -> str:
        """The int8 analysis's two sentences, and the layers whose weights cost most."""
        costly = self.costliest
        words = [self.layers.verdict(), "layers whose fp16 weights cost the outputs most: " + (
            ", ".join(f"{r.layer} ({'/'.join(r.op_nodes) or r.tensor}, "
                      f"{self._output_snr(r):.1f} dB at the outputs)" for r in costly[:5])
            if costly else "none (every layer's weights are exact in fp16)")]
        return "\n".join(words)

    def _cells(self, row: LayerQuality) -> tuple:
        threshold = self.layers.threshold_db
        figures = self.weights.get(row.layer) or WeightRounding(row.layer, [])
        flag = "<" if _below(row.isolated_snr_db, threshold) else (
            "." if _below(row.snr_db, threshold) else "")
        notes = "; ".join(n for n in (row.note, figures.note) if n)
        return (row.layer, row.layer_name, row.tensor, _fmt(row.snr_db),
                _fmt(row.isolated_snr_db), _fmt(figures.snr_db), _fmt(figures.output_snr_db),
                (flag + "  " + notes).strip())


def analyze_fp16(float_model: "str | os.PathLike[str] | onnx.ModelProto",
                 artifact_dir: "str | os.PathLike[str]",
                 inputs: Union[None, Mapping[str, Any], Sequence[Mapping[str, Any]]] = None,
                 *, threshold_db: float = DEFAULT_THRESHOLD_DB, seed: int = 0,
                 samples: int = 1, gemm: str = "numpy") -> Fp16Analysis:
    """Every Mrvl layer of the fp16 artifact against the float model (module docstring).
    ``inputs``: a feed dict, a list of them, or None for ``samples`` seeded random feeds;
    ``gemm``: how the simulator runs (``HybridSession``)."""
    proto = load_model(float_model)
    feeds = sample_feeds(HybridSession(artifact_dir), inputs, seed, samples, input_kinds(proto))
    layers = analyze_quantization(float_model, artifact_dir, feeds, threshold_db=threshold_db,
                                  gemm=gemm)
    name_nodes(proto)  # the names the rows' op nodes use
    # PaddlePaddle exports its weights as Constant nodes (slanet-plus has no initializer):
    # the weights-alone figure rounds initializers, and would find no weight to round.
    constants_as_initializers(proto)
    return Fp16Analysis(layers, weight_rounding(proto, layers.rows, feeds))


def weight_rounding(proto: onnx.ModelProto, rows: Sequence[LayerQuality],
                    feeds: Sequence[Feed]) -> Dict[str, WeightRounding]:
    """Per layer whose op nodes read float initializers: the model with only those rounded to
    fp16 against the model as it is, at the layer's tensor and at the outputs."""
    outputs = [o.name for o in proto.graph.output]
    # A layer of a rewritten form (a canonical Sub from a constant, a norm's new Mul) stands
    # for a tensor the model does not have: its weights are measured where the model has it.
    produced = {t for node in proto.graph.node for t in node.output}
    rows = [r for r in rows if r.tensor in produced]
    base_proto = load_model(proto)
    base = reference_session(base_proto, [TensorSpec(r.tensor, (), "float32") for r in rows], 3)
    # Only the outputs' references are kept for every feed; a layer's own tensor is run for
    # it when its turn comes (kept for every layer, a large model's would not fit in memory).
    refs = [dict(zip(outputs, run_reference(base, outputs, feed, base_proto))) for feed in feeds]
    found: Dict[str, WeightRounding] = {}
    for row in rows:
        readers = _float_initializers(proto, row.op_nodes)
        names = list(dict.fromkeys(i for inits in readers.values() for i in inits))
        if names:
            copy = load_model(proto)
            folded = round_folded(copy, list(readers))
            if not folded:
                _round_each(copy, names)
            own = [{**ref, row.tensor: run_reference(base, [row.tensor], feed, base_proto)[0]}
                   for feed, ref in zip(feeds, refs)]
            found[row.layer] = _rounded_run(copy, row, names, feeds, own, outputs)
            if len(readers) > 1 and not folded:
                found[row.layer].note = (f"weights of {', '.join(readers)} rounded apart; the "
                                         "artifact rounds their fold once: an estimate")
    return found


def _float_initializers(proto: onnx.ModelProto, op_nodes: Sequence[str]
                        ) -> Dict[str, List[str]]:
    """Op node -> the float initializers it reads (nodes that read none left out)."""
    floats = {t.name for t in proto.graph.initializer if t.data_type in _FLOAT}
    ops = set(op_nodes)
    readers = {n.name: [i for i in n.input if i in floats] for n in proto.graph.node
               if n.name in ops}
    return {name: inits for name, inits in readers.items() if inits}


def _round_each(copy: onnx.ModelProto, names: List[str]) -> None:
    chosen = set(names)
    for tensor in copy.graph.initializer:
        if tensor.name in chosen:
            value = numpy_helper.to_array(tensor)
            rounded = round_to_fp16(value.astype(np.float32))[0].astype(value.dtype)
            tensor.CopyFrom(numpy_helper.from_array(rounded, tensor.name))


def _rounded_run(copy: onnx.ModelProto, row: LayerQuality, names: List[str],
                 feeds: Sequence[Feed], refs: List[Dict[str, np.ndarray]],
                 outputs: List[str]) -> WeightRounding:
    """The model with the layer's weights rounded (``copy``), run on every feed, compared."""
    session = reference_session(copy, [TensorSpec(row.tensor, (), "float32")], 3)
    wanted = list(dict.fromkeys(outputs + [row.tensor]))
    own, per_output = Sums(), {o: (Sums(), Worst()) for o in outputs}
    for feed, ref in zip(feeds, refs):
        got = dict(zip(wanted, run_reference(session, wanted, feed, copy)))
        own.add(np.asarray(got[row.tensor]), np.asarray(ref[row.tensor]))
        for name in outputs:
            sums, worst = per_output[name]
            sums.add(np.asarray(got[name]), np.asarray(ref[name]))
            worst.add(np.asarray(got[name]), np.asarray(ref[name]))
    worst_out = min(outputs, key=lambda o: snr_db(per_output[o][0]))
    return WeightRounding(row.layer, names, snr_db(own), snr_db(per_output[worst_out][0]),
                          max(w.max_rel for _, w in per_output.values()))


def _finite(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value)


def _below(value: Optional[float], threshold: float) -> bool:
    return value is not None and value < threshold


def _fmt(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return "exact" if value == math.inf else f"{value:.1f}"


def _json(figures: WeightRounding) -> Dict[str, Any]:
    """JSON has no infinity: an exact figure is null with ``exact``: true."""
    return json_snr(asdict(figures), ("snr_db", "output_snr_db"))
