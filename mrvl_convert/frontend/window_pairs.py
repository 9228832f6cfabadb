"""The QuantizeLinear -> DequantizeLinear pairs of a QDQ model's windows of frames, for
``window_conv.py``: its int8 form.

quantize_static writes a pair after each op it quantizes: madmom's onset CNN in int8 is
``Slice -> Unsqueeze -> Q -> DQ -> Concat -> Q -> DQ -> Reshape -> Q -> DQ -> MatMul (DQ of an
int8 weight) -> Q -> DQ``. Every pair is elementwise with one scale and zero point, and the
Slices, Unsqueezes, Concat and Reshape only select and move elements, so the pairs the windows
pass are the same function of each element of the frames, applied in order, as long as every
window passes one pair of the same scale and zero point: the int8 Conv along the frames reads
the frames through those pairs, its output through a pair of the MatMul's output scale.

Exact: a pair moved before a data movement maps each element as it did after it (per-tensor
Q/DQ commute with a selection), two equal pairs in a row are one (``DQ(Q(DQ(Q(x))))`` is
``DQ(Q(x))``: q s / s rounds back to q), and a pair of the output's scale before the MatMul's
own Q(s) gives that Q a value on its grid, which it maps to the same integer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.core.qdq_grid import Grid, grid


@dataclass
class Pair:
    """One scale and zero point (constants), their grid, and the model's Q and DQ nodes using
    them."""
    scale: gs.Tensor
    zero: Optional[gs.Tensor]
    grid: Grid
    nodes: Tuple[gs.Node, ...] = ()

    def same(self, other: "Pair") -> bool:
        return self.grid == other.grid


def _params(node: gs.Node) -> Optional[Pair]:
    """The scalar scale and zero point of a Q or DQ, or None."""
    params = [t for t in node.inputs[1:] if t.name]
    reading = grid(node)
    if reading is None or not params or not all(np.asarray(const_value(t)).ndim == 0
                                                for t in params):
        return None
    return Pair(params[0], params[1] if len(params) > 1 else None, reading)


def unpaired(tensor: gs.Tensor, outputs: set) -> Tuple[gs.Tensor, Optional[Pair]]:
    """``tensor`` = DQ(Q(x)) of one scalar scale and zero point, each link read alone and no
    graph output: (x, the pair); else (tensor, None)."""
    dq = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    if dq is None or dq.op != "DequantizeLinear" or len(dq.inputs[0].inputs) != 1:
        return tensor, None
    q = dq.inputs[0].inputs[0]
    inner, source = dq.inputs[0], q.inputs[0] if q.inputs else None
    if q.op != "QuantizeLinear" or source is None or len(inner.outputs) != 1 \
            or len(source.outputs) != 1 or {inner.name, source.name} & outputs:
        return tensor, None
    pair, twin = _params(q), _params(dq)
    if pair is None or twin is None or not pair.same(twin):
        return tensor, None
    return source, Pair(pair.scale, pair.zero, pair.grid, (q, dq))


def output_pair(tensor: gs.Tensor, outputs: set) -> Optional[Pair]:
    """The pair of the one QuantizeLinear reading ``tensor`` (no graph output), or None."""
    if len(tensor.outputs) != 1 or tensor.name in outputs \
            or tensor.outputs[0].op != "QuantizeLinear":
        return None
    return _params(tensor.outputs[0])


def int8_weight(tensor: gs.Tensor) -> Optional[gs.Node]:
    """The DequantizeLinear of a constant 2-D int8 matrix, one scalar scale and zero point, that
    gives ``tensor`` and nothing else reads, or None."""
    dq = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    if dq is None or dq.op != "DequantizeLinear" or not is_const(dq.inputs[0]) \
            or len(tensor.outputs) != 1 or _params(dq) is None:
        return None
    value = const_value(dq.inputs[0])
    return dq if value.ndim == 2 and value.dtype == np.int8 else None


def distinct(pairs: List[Pair]) -> List[Pair]:
    """``pairs`` without a pair equal to the one before it (the same function, applied twice)."""
    kept: List[Pair] = []
    for pair in pairs:
        if not kept or not kept[-1].same(pair):
            kept.append(pair)
    return kept


def add_pair(x: gs.Tensor, pair: Pair, node: Callable[..., gs.Tensor]) -> gs.Tensor:
    """``DQ(Q(x))`` at ``pair``'s scale and zero point, through ``node(op, inputs, shape,
    dtype)`` (the caller's adder)."""
    params = [pair.scale] + ([pair.zero] if pair.zero is not None else [])
    dtype = const_value(pair.zero).dtype if pair.zero is not None else np.uint8
    ints = node("QuantizeLinear", [x, *params], shape=static_shape(x), dtype=dtype)
    return node("DequantizeLinear", [ints, *params], shape=static_shape(x), dtype=x.dtype)
