"""The power of two each norm's input is scaled by (``frontend/norm_range.py``), chosen from the
float32 values the model computes on samples.

For every ReduceMean of squares (``Pow(d, 2)`` or ``Mul(d, d)``) the largest float32 |d| over the
feeds, ``peak``, gives the smallest ``k >= 0`` with ``peak * 2**-k <= 64``: the scaled squares
then stay at or below 4096, 16 times under fp16's largest 65504, so a sample whose norm input is up
to 4 times the largest one seen still does not overflow; a norm whose peak is at most 64 is not
scaled (k 0 is left out). The choice is the samples': a later input far beyond them can still
overflow, which verify names (``fp16_overflow.py``). ``--keep-fp32 auto`` chooses on its choosing
half of the verify samples (``core/samples.py`` ``remedy_split``) and judges on the other.

A norm on a pre-norm residual stream (``frontend/residual_range.py``) has its stream scaled by
its largest norm's k less 7 (the stream's peak to at most 8192) and itself by the rest.

- requires: the model (a copy is run; it is not changed) and the feeds;
- ensures: ReduceMean node name -> k >= 1, for the norms whose peak exceeds 64; {} when none does,
  or when the model cannot be run (the caller then keeps what overflows in fp32 instead).
"""
from __future__ import annotations

import math
from typing import Dict, Sequence

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.norm_range import MAX_EXPONENT, scale_norms, squared_input
from mrvl_convert.verify.fp16_overflow import peaks_of
from mrvl_convert.verify.reference import load_model

#: The largest |scaled norm input| chosen for: squares at most 4096, 16x under 65504.
TARGET_PEAK = 64.0


def norm_scales(model: object, feeds: Sequence[Dict[str, np.ndarray]],
                log_severity: int = 3) -> Dict[str, int]:
    """ReduceMean of squares -> k, from the float32 peaks over ``feeds`` (module docstring)."""
    if not feeds:
        return {}
    proto = load_model(model)
    graph = gs.import_onnx(proto)
    squared = {n.name: squared_input(n) for n in graph.nodes if n.op == "ReduceMean"}
    tensors = {name: t.name for name, t in squared.items() if t is not None and t.name}
    if not tensors:
        return {}
    peaks = peaks_of(proto, sorted(set(tensors.values())), feeds, log_severity)
    chosen = {name: exponent(peaks.get(tensor, 0.0)) for name, tensor in tensors.items()}
    return {name: k for name, k in sorted(chosen.items()) if k > 0}


def exponent(peak: float) -> int:
    """The smallest k >= 0 with ``peak * 2**-k <= TARGET_PEAK`` (at most ``MAX_EXPONENT``)."""
    if not math.isfinite(peak) or peak <= TARGET_PEAK:
        return 0
    mantissa, power = math.frexp(peak / TARGET_PEAK)  # peak / 64 = mantissa * 2**power
    return min(power - 1 if mantissa == 0.5 else power, MAX_EXPONENT)


def scaled_like(proto: onnx.ModelProto, manifest: Dict[str, object]) -> onnx.ModelProto:
    """``proto`` with the norms the artifact scaled (its manifest's ``options.norm_scales``)
    scaled alike (exact): a reference rounded where the artifact rounds then computes them in
    range as the artifact does, instead of overflowing where the artifact does not."""
    scales = (manifest.get("options") or {}).get("norm_scales")  # type: ignore[union-attr]
    if not scales:
        return proto
    graph = gs.import_onnx(proto)
    scale_norms(graph, scales, Rewrites())
    scaled = gs.export_onnx(graph.cleanup(remove_unused_graph_inputs=False).toposort(),
                            do_type_check=False)
    scaled.ir_version = proto.ir_version
    return scaled
