"""The one reader of a per-tensor Q/DQ's grid (core/qdq_grid.py): a DequantizeLinear without a
zero point is on its input's integer type (ONNX: the zero it defaults to is of that type), a
QuantizeLinear without one on uint8 (test_packed_qkv.py: a pass comparing the two)."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import pytest

from mrvl_convert.core.qdq_grid import Grid, grid, integer_type, per_tensor_qdq


def _node(op, values, zero=None, **attrs):
    data = gs.Constant("data", values) if op == "DequantizeLinear" else gs.Variable("data",
                                                                                    np.float32)
    inputs = [data, gs.Constant("scale", np.array(0.25, np.float32))]
    if zero is not None:
        inputs.append(gs.Constant("zero", np.asarray(zero)))
    return gs.Node(op, "n", attrs=attrs, inputs=inputs, outputs=[gs.Variable("out")])


def test_grid_reads_scale_zero_point_and_type():
    assert grid(_node("DequantizeLinear", np.int8([1, -2]), np.int8(3))) == Grid(0.25, 3, "int8")
    assert grid(_node("QuantizeLinear", None, np.uint8(128))) == Grid(0.25, 128, "uint8")


@pytest.mark.parametrize("op, values, dtype", [("QuantizeLinear", None, "uint8"),
                                               ("DequantizeLinear", np.int8([1]), "int8"),
                                               ("DequantizeLinear", np.uint8([1]), "uint8")])
def test_an_absent_zero_point_is_zero_of_onnx_default_type(op, values, dtype):
    node = _node(op, values)
    assert integer_type(node) == dtype and grid(node) == Grid(0.25, 0, dtype)


def test_no_grid_for_per_channel_or_typed_output_or_other_ops():
    per_channel = _node("DequantizeLinear", np.int8([1, 2]), np.int8([0, 0]))
    per_channel.inputs[1] = gs.Constant("scales", np.float32([0.5, 0.25]))
    assert not per_tensor_qdq(per_channel) and grid(per_channel) is None
    assert grid(_node("QuantizeLinear", None, output_dtype=3)) is None
    assert grid(gs.Node("Relu", "r", inputs=[gs.Variable("x")], outputs=[gs.Variable("y")])) \
        is None
