"""The nodes ``space_to_batch.py`` adds around the dilated Conv it makes (see that module):
each derived from the Conv, its per-element ops moved after it and an int8 result laid out
between a DequantizeLinear / QuantizeLinear round trip.

Requires: the join's per-element nodes read before the chain is cut (their operands, moving
input, per-channel values and output type).
Ensures: ``Adder`` appends nodes to the graph, each ``derived`` from the Conv; ``moved_again``
records a moved node as ``merged`` into the node that now computes it.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.derived_nodes import DerivedNodes


def laid_out_int8(add: Adder, out: gs.Tensor, perm: Tuple[int, ...], last: tuple
                   ) -> Tuple[gs.Tensor, Tuple[int, ...]]:
    """An int8 result laid out between a DequantizeLinear and a QuantizeLinear of its own
    scale and zero point (the round trip gives the same integers), where an int8 reshape or
    transpose layer reads it."""
    node, operands, _, _, dtype = last
    out = add.node("DequantizeLinear", [out, *operands[1:]], static_shape(out),
                   dtype=np.float32)
    out = add.permuted(out, perm)
    out = add.node("QuantizeLinear", [out, *operands[1:]], static_shape(out), dtype=dtype,
                   **node.attrs)
    return out, tuple(range(len(perm)))


def moved_again(add: Adder, step: tuple, out: gs.Tensor, shape: List[int],
                 done: Rewrites) -> gs.Tensor:
    """A per-element node of the join applied to ``out`` (its constant per channel)."""
    node, operands, k, values, dtype = step
    operands[k] = out
    if values is not None:
        operands[1 - k] = add.per_channel(operands[1 - k], values.reshape(1, shape[1], 1, 1),
                                          node.name)
    out = add.node(node.op, operands, shape, dtype=dtype, **node.attrs)
    done.merged[node.name] = add.last.name
    return out


class Adder(DerivedNodes):
    """Adds the nodes around the dilated Conv, each derived from the Conv."""

    def node(self, op: str, inputs: List[gs.Tensor], shape: Optional[List[int]] = None,
             dtype: Any = None, out: Optional[gs.Tensor] = None, **attrs: Any) -> gs.Tensor:
        """A new node derived from the Conv; its output of ``dtype`` (default: its first
        input's, float32 if unknown)."""
        dtype = dtype if dtype is not None else inputs[0].dtype or np.float32
        return super().node(op, inputs, shape, dtype, out, **attrs)

    def per_channel(self, operand: gs.Tensor, values: np.ndarray, served: str) -> gs.Tensor:
        """``values`` as ``operand`` gives its constant: a constant, or the same
        DequantizeLinear (scale, zero point) of these integers."""
        const = gs.Constant(self.names.fresh(f"{served}_per_channel"), values)
        if is_const(operand):
            return const
        dq = operand.inputs[0]
        return self.node(dq.op, [const, *dq.inputs[1:]], list(values.shape),
                         dtype=operand.dtype, **dq.attrs)

    def ints(self, values: List[int]) -> gs.Constant:
        return gs.Constant(self.names.fresh(f"{self.served}_i64"), np.array(values, np.int64))

    def steps(self, x: gs.Tensor, nodes: Sequence[gs.Node]) -> gs.Tensor:
        """``x`` through a copy of each per-tensor Q/DQ of ``nodes`` in turn."""
        for node in nodes:
            x = self.node(node.op, [x, *node.inputs[1:]], static_shape(x),
                          dtype=node.outputs[0].dtype, **node.attrs)
        return x

    def permuted(self, x: gs.Tensor, perm: Tuple[int, ...]) -> gs.Tensor:
        """x.transpose(perm); a Reshape where only unit axes move."""
        shape = static_shape(x)
        target = [shape[a] for a in perm]
        if list(perm) == sorted(perm):
            return x
        moving = [a for a in perm if shape[a] != 1]
        if moving == sorted(moving):  # the other axes keep their order
            return self.node("Reshape", [x, self.ints(target)], target)
        return self.node("Transpose", [x], target, perm=list(perm))

    def finish(self, out: gs.Tensor, perm: Tuple[int, ...], result: gs.Tensor) -> None:
        """Write ``out.transpose(perm)`` into ``result``."""
        self.permuted(out, perm)  # self.last now writes out or its permutation
        self.last.outputs.clear()
        self.last.outputs.append(result)
