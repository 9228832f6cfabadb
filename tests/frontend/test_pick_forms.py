"""A Gather of constant indices as a Slice (and a Squeeze), and a pick of a Concat's output
within one input read from that input (frontend/pick_forms.py): each computes on onnxruntime,
bit for bit, what the original does; what the module leaves is left as it was."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from mrvl_convert.frontend.pick_forms import rewrite_picks
from support.exporter_picks import applied, assert_bit_equal, torch_gru_states
from support.models import Builder


def _picks(model):
    return applied(model, lambda graph, done: rewrite_picks(graph, 14, done))


def _gather(indices, axis, shape=(2, 3, 4), dtype=np.int64):
    b = Builder(seed=0, opset=14)
    x = b.op("Relu", [b.input("x", list(shape))])
    y = b.op("Gather", [x, b.const(np.array(indices, dtype))], name="gather", axis=axis)
    return b.model([y])


@pytest.mark.parametrize("indices,axis,squeezed", [
    (1, 0, True), (-1, 0, True), (2, 1, True), (-3, 2, True), (0, -1, True),
    ([2], 1, False), ([-2], 2, False), ([1, 2], 1, False), ([0, 1, 2, 3], 2, False),
    (np.int32(-2), 1, True)])
def test_a_gather_of_constant_indices_is_a_bit_equal_slice(indices, axis, squeezed):
    model = _gather(indices, axis, dtype=np.asarray(indices).dtype)
    proto, done, changed = _picks(model)
    assert changed
    ops = [n.op_type for n in proto.graph.node]
    assert ops == ["Relu", "Slice"] + (["Squeeze"] if squeezed else []), ops
    assert "Gather of constant indices as a Slice" in done.rewritten["gather"]
    assert_bit_equal(model, proto)


@pytest.mark.parametrize("indices,axis", [([2, 0], 1), ([0, 2], 2), ([[0, 1]], 2), (5, 2),
                                          (-4, 1), ([], 0)])
def test_indices_not_one_run_in_range_are_left(indices, axis):
    proto, done, changed = _picks(_gather(indices, axis))
    assert not changed and [n.op_type for n in proto.graph.node] == ["Relu", "Gather"]


def test_indices_computed_at_run_time_and_integer_data_are_left():
    b = Builder(seed=0, opset=14)
    x = b.op("Relu", [b.input("x", [2, 3])])
    i = b.input("i", [], dtype=TensorProto.INT64)
    ids = b.input("ids", [4, 3], dtype=TensorProto.INT64)
    y = b.op("Gather", [x, i], axis=0)
    z = b.op("Gather", [ids, b.const(np.array(1, np.int64))], axis=0)
    proto, _, changed = _picks(b.model([y, z]))
    assert not changed and [n.op_type for n in proto.graph.node].count("Gather") == 2


def _concat_slice(starts, ends, axes, sizes=(2, 3, 2), steps=None):
    """Relu of three inputs joined on axis 1 of [2, n, 5], then a Slice of the join."""
    b = Builder(seed=0, opset=14)
    parts = [b.op("Relu", [b.input(f"x{i}", [2, n, 5])]) for i, n in enumerate(sizes)]
    joined = b.op("Concat", parts, name="join", axis=1)
    inputs = [joined] + [b.const(np.array(v, np.int64)) for v in (starts, ends, axes)]
    if steps is not None:
        inputs.append(b.const(np.array(steps, np.int64)))
    return b.model([b.op("Slice", inputs, name="pick")])


@pytest.mark.parametrize("starts,ends,axes,reads", [
    ([2], [4], [1], "x1"), ([3], [5], [1], "x1"), ([-2], [10 ** 9], [1], "x2"),
    ([0, 1], [1, 2], [0, 1], "x0"), ([1, 5, 3], [2, 7, 5], [2, 1, 0], "x2"),
    ([-4], [-3], [-2], "x1")])
def test_a_slice_within_one_concat_input_reads_it(starts, ends, axes, reads):
    model = _concat_slice(starts, ends, axes)
    proto, done, changed = _picks(model)
    assert changed and "Concat" not in [n.op_type for n in proto.graph.node]
    (pick,) = [n for n in proto.graph.node if n.op_type == "Slice"]
    relu = next(n for n in proto.graph.node if n.output[0] == pick.input[0])
    assert relu.input[0] == reads
    assert_bit_equal(model, proto)


def test_a_slice_of_one_whole_input_reads_all_of_it():
    b = Builder(seed=0, opset=14)
    parts = [b.op("Relu", [b.input(f"x{i}", [2, n])]) for i, n in enumerate((2, 3))]
    joined = b.op("Concat", parts, axis=1)
    pick = b.op("Slice", [joined] + [b.const(np.array([v], np.int64)) for v in (2, 5, 1)],
                name="pick")
    model = b.model([b.op("Sigmoid", [pick])])
    proto, done, changed = _picks(model)
    relu, pick, _ = proto.graph.node  # the other input's Relu is read by nothing now
    assert changed and (relu.op_type, relu.input[0], pick.name) == ("Relu", "x1", "pick")
    starts, ends = (next(numpy_helper.to_array(t) for t in proto.graph.initializer
                         if t.name == pick.input[i]) for i in (1, 2))
    assert (starts.tolist(), ends.tolist()) == ([0], [3])
    assert_bit_equal(model, proto)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [1], None), ([0], [7], [1], None), ([0], [2], [0], None),
    ([2], [4], [1], [2]), ([4], [2], [1], None)])
def test_a_slice_across_inputs_or_off_the_concat_axis_is_left(starts, ends, axes, steps):
    proto, _, changed = _picks(_concat_slice(starts, ends, axes, steps=steps))
    assert not changed and "Concat" in [n.op_type for n in proto.graph.node]


def test_pytorchs_picked_gru_states_fold_the_concat_away():
    """plcmos_v2's form: Concat(Y_h, Y_h) on axis 0, Gather rows -2, -1 of it."""
    model = torch_gru_states()
    proto, done, _ = _picks(model)
    ops = [n.op_type for n in proto.graph.node]
    assert "Gather" not in ops and ops.count("Concat") == 3, ops  # cat_states is gone
    assert "reads the Concat's input h2" in done.rewritten["pick_a"]
    assert_bit_equal(model, proto)
