"""``frontend/index_moves.py``: each data movement run on indices moves them as onnxruntime
moves the data (the index arrays are what ``space_to_batch.py`` recognises forms by)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.index_moves import ABSENT, move
from support.models import run_ort

_SHAPE = [2, 8, 6, 4]


def _one_node(op: str, operands, out_shape, **attrs) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v), f"in{i}") for i, v in enumerate(operands)]
    node = helper.make_node(op, ["x"] + [t.name for t in inits], ["y"], name="moved", **attrs)
    graph = helper.make_graph(
        [node], "move", [helper.make_tensor_value_info("x", TensorProto.FLOAT, _SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    return onnx.shape_inference.infer_shapes(model)


_CASES = [
    ("Transpose", [], [6, 2, 4, 8], {"perm": [2, 0, 3, 1]}),
    ("SpaceToDepth", [], [2, 32, 3, 2], {"blocksize": 2}),
    ("DepthToSpace", [], [2, 2, 12, 8], {"blocksize": 2}),
    ("DepthToSpace", [], [2, 2, 12, 8], {"blocksize": 2, "mode": "CRD"}),
    ("Pad", [np.array([0, 1, 2, 0, 0, 3, 0, 1], np.int64)], [2, 12, 8, 5], {}),
    ("Slice", [np.array([1, -5], np.int64), np.array([100, -1], np.int64),
               np.array([1, 2], np.int64), np.array([2, 1], np.int64)], [2, 4, 1, 4], {}),
    ("Reshape", [np.array([0, -1, 4], np.int64)], [2, 48, 4], {}),
    ("Unsqueeze", [np.array([1], np.int64)], [2, 1, 8, 6, 4], {}),
]


@pytest.mark.parametrize("op, operands, out_shape, attrs", _CASES)
def test_indices_move_as_onnxruntime_moves_data(op, operands, out_shape, attrs):
    model = _one_node(op, operands, out_shape, **attrs)
    node = next(n for n in gs.import_onnx(model).nodes if n.name == "moved")
    index = np.arange(int(np.prod(_SHAPE))).reshape(_SHAPE)
    moved = move(node, index)
    data = (index + 1).astype(np.float32)  # + 1: a pad's 0 stays apart from element 0
    want = run_ort(model, {"x": data}, optimize=False)["y"]
    assert moved.shape == want.shape
    assert np.array_equal(np.where(moved == ABSENT, 0, moved + 1), want)


def test_a_pad_of_another_value_is_no_movement():
    model = _one_node("Pad", [np.array([0, 1, 0, 0, 0, 0, 0, 0], np.int64),
                              np.array(2.0, np.float32)], [2, 9, 6, 4])
    node = next(n for n in gs.import_onnx(model).nodes if n.name == "moved")
    assert move(node, np.arange(int(np.prod(_SHAPE))).reshape(_SHAPE)) is None
