"""An int8 region's float span whose input exceeds fp16: it runs on the CPU in fp32.

Inside an int8 (QDQ) region the ops no int8 layer takes (a GELU, a LayerNorm: ``float_region``
in ``checks_elementwise.py``) run as fp16 layers on the dequantized values. The QDQ model states
their range statically: a DequantizeLinear of scale ``s`` and zero point ``z`` yields values in
``[(qmin - z) * s, (qmax - z) * s]``. Where that reaches beyond fp16's largest value 65504
(magika's ``dense_2``: scale 14538, +-1.85e6), the fp16 layers compute inf where the QDQ model
computes finite values, so the DequantizeLinear and every float op after it up to the region's
next QuantizeLinear stay on the CPU in fp32, as onnxruntime computes them: exact, no bound.

Requires: a canonical graph (Q/DQ nodes with constant scales where they are per-tensor).
Ensures: ``wide_float_spans`` names those nodes, each with a one-line reason naming the
DequantizeLinear's tensor and its range; a DequantizeLinear whose consumers are all int8
layers (``op -> QuantizeLinear`` with an int8 form) is left alone: no fp16 value is formed.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Dict, List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, present
from mrvl_convert.kernels.fp16 import FP16_MAX
from mrvl_convert.rules.int8_forms import QDQ_OPS, builtin_int8_op_types

# integer ranges of the quantized types a DequantizeLinear reads
_LIMITS = MappingProxyType({np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255),
                            np.dtype(np.int16): (-32768, 32767),
                            np.dtype(np.uint16): (0, 65535)})


def dequantized_range(node: gs.Node) -> Optional[float]:
    """The largest magnitude a DequantizeLinear of constant scale (and zero point) yields;
    None where the scale is computed at run time or the input type is unknown."""
    scale, zero = present(node, 1), present(node, 2)
    if scale is None or not is_const(scale) or (zero is not None and not is_const(zero)):
        return None
    dtype = const_value(zero).dtype if zero is not None else node.inputs[0].dtype
    limits = _LIMITS.get(np.dtype(dtype)) if dtype is not None else None
    if limits is None:
        return None
    z = const_value(zero).astype(np.float64) if zero is not None else np.zeros(1)
    s = np.abs(const_value(scale).astype(np.float64))
    return float(np.max(np.maximum(np.abs(limits[0] - z), np.abs(limits[1] - z)) * s))


def wide_float_spans(graph: gs.Graph) -> Dict[str, str]:
    """Node name -> reason, for each activation DequantizeLinear whose range exceeds fp16 and
    that feeds a float op (not an int8 layer), and the float ops after it up to the next
    QuantizeLinear."""
    kept: Dict[str, str] = {}
    for node in graph.nodes:
        if node.op != "DequantizeLinear" or is_const(node.inputs[0]):
            continue
        peak = dequantized_range(node)
        if peak is None or peak <= FP16_MAX:
            continue
        span = [n for c in node.outputs[0].outputs if not _int8_layer(c) for n in _float_after(c)]
        if not span:
            continue
        reason = (f"dequantized range +-{peak:.2g} exceeds fp16's 65504 (int8 tensor "
                  f"{node.inputs[0].name}): fp16 layers would compute inf, fp32 on the CPU")
        for member in [node] + span:
            kept.setdefault(member.name, reason)
    return kept


def _int8_layer(node: gs.Node) -> bool:
    """``node`` is an op with an int8 form whose every consumer is a QuantizeLinear: the
    region's int8 layer, which never forms the dequantized values."""
    consumers = [c for t in node.outputs for c in t.outputs]
    return (node.op in builtin_int8_op_types() and bool(consumers)
            and all(c.op == "QuantizeLinear" for c in consumers))


def _float_after(start: gs.Node) -> List[gs.Node]:
    """``start`` and the ops its float outputs reach without passing a Q/DQ node."""
    found, frontier, seen = [], [start], {id(start)}
    while frontier:
        node = frontier.pop()
        if node.op in QDQ_OPS:
            continue
        found.append(node)
        for consumer in (c for t in node.outputs for c in t.outputs):
            if id(consumer) not in seen:
                seen.add(id(consumer))
                frontier.append(consumer)
    return found
