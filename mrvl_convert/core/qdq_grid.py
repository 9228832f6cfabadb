"""The grid of a per-tensor QuantizeLinear / DequantizeLinear: its one scale, zero point and
integer type, read in one place for the frontend's passes (``qdq_steps.py``, ``window_pairs.py``,
``packed_qkv.py``) and the int8 rules (``rules/qnn_checks.py``).

Requires: nothing of the node (any node may be asked).
Ensures: ``grid`` is a ``Grid`` only for a Q/DQ with one output, no ``output_dtype`` attribute,
and a scale and zero point that are constants of one value each; ``integer_type`` is ONNX's
reading of the quantized side: the zero point's type, else uint8 for a QuantizeLinear (its default
output), else the type of the DequantizeLinear's input (the zero it defaults to is of that type).
Read-only.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, dtype_name, is_const, present

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


class Grid(NamedTuple):
    """The values a per-tensor Q/DQ maps to: ``(q - zero) * scale`` for each ``q`` of ``dtype``."""
    scale: float
    zero: int
    dtype: str


def per_tensor_qdq(node: gs.Node) -> bool:
    """A QuantizeLinear or DequantizeLinear with one constant scale and zero point value."""
    return node.op in QDQ_OPS and len(node.outputs) == 1 and all(
        is_const(t) and const_value(t).size == 1 for t in node.inputs[1:] if t.name)


def integer_type(node: gs.Node) -> str:
    """The type name of a Q/DQ's integer side (``unknown`` where the graph does not say)."""
    zero = present(node, 2)
    if zero is not None:
        return dtype_name(zero)
    return "uint8" if node.op == "QuantizeLinear" else dtype_name(node.inputs[0])


def scale_size(node: gs.Node) -> Optional[int]:
    """How many values a Q/DQ's constant scale holds; None when it has no constant scale."""
    scale = present(node, 1)
    return const_value(scale).size if scale is not None and is_const(scale) else None


def grid(node: gs.Node) -> Optional[Grid]:
    """The grid of a per-tensor Q/DQ; None for any other node, or one whose ``output_dtype``
    attribute sets the type."""
    if not per_tensor_qdq(node) or scale_size(node) != 1 or node.attrs.get("output_dtype"):
        return None
    zero = present(node, 2)
    point = int(const_value(zero).reshape(-1)[0]) if zero is not None else 0
    return Grid(float(const_value(node.inputs[1]).reshape(-1)[0]), point, integer_type(node))
