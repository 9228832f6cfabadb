"""A Concat of 2-D or 3-D tensors on a non-leading axis as the channel Concat of 4-D views
(frontend/concat_views.py): each form computes on onnxruntime, bit for bit, what the Concat
does; a model of batch over 1 keeps its axis 0 as the batch; what the module leaves is left."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from mrvl_convert.frontend.concat_views import rewrite_concat_views
from support.exporter_picks import applied, assert_bit_equal
from support.models import Builder


def _joined(shapes, axis, batch=1, constant=False):
    """Inputs x_i ``[batch, prod(shape_i)]`` -> Relu -> Reshape to shape_i -> Concat(axis)
    (``join``) -> Sigmoid: the Concat reads tensors of any shape from a batch-``batch``
    model."""
    b = Builder(seed=0, opset=14)
    parts = []
    for i, shape in enumerate(shapes):
        x = b.op("Relu", [b.input(f"x{i}", [batch, int(np.prod(shape)) // batch])])
        parts.append(b.op("Reshape", [x, b.const(np.array(shape, np.int64))]))
    if constant:
        shape = list(shapes[0])
        parts.append(b.const(np.ones(shape, np.float32)))
    return b.model([b.op("Sigmoid", [b.op("Concat", parts, name="join", axis=axis)])])


def _views(model):
    return applied(model, rewrite_concat_views)


def _concat(proto):
    (node,) = [n for n in proto.graph.node if n.op_type == "Concat"]
    return node


@pytest.mark.parametrize("shapes,axis,transposed", [
    ([[1, 4], [1, 3]], 1, False), ([[1, 4], [1, 3], [1, 2]], -1, False),
    ([[1, 1, 4], [1, 1, 6]], 2, False), ([[1, 2, 3], [1, 4, 3]], 1, False),
    ([[6, 4], [6, 3]], 1, True),            # [T, C] of a batch-1 model
    ([[5, 1, 4], [5, 1, 4]], 2, True),      # tf2onnx's bidirectional [T, N, h]
    ([[5, 2, 3], [5, 1, 3]], 1, True), ([[2, 3, 4], [2, 3, 1]], -1, True),
    ([[1, 4, 3, 1], [1, 4, 3, 1]], 3, True),     # tf2onnx's stack of [N, H, W, 1] on W
    ([[1, 2, 3, 2], [1, 2, 5, 2]], 2, True),     # ... and its join on H
    ([[1, 3, 1, 4], [1, 3, 1, 6]], -1, True),    # a lifted 1-D signal on its time axis
    ([[1, 1, 1, 4], [1, 1, 1, 2]], 3, False)])   # P == 1
def test_each_form_is_a_bit_equal_4d_channel_concat(shapes, axis, transposed):
    model = _joined(shapes, axis)
    proto, done, changed = _views(model)
    assert changed
    concat = _concat(proto)
    assert [a.i for a in concat.attribute if a.name == "axis"] == [1]
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("Transpose") == (len(shapes) + 1 if transposed else 0), ops
    assert "channel Concat of their 4-D views" in done.rewritten["join"]
    assert all(done.derived[n.name] == "join" for n in proto.graph.node
               if n.op_type in ("Transpose", "Reshape") and n.name.startswith("join_"))
    assert_bit_equal(model, proto)


def test_a_batch_of_several_samples_stays_on_axis_0():
    """Batch 3: ``[3, C_i]`` as ``[3, C_i, 1, 1]`` (a region can still run in chunks)."""
    model = _joined([[3, 4], [3, 5]], 1, batch=3)
    proto, _, changed = _views(model)
    assert changed and "Transpose" not in [n.op_type for n in proto.graph.node]
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in proto.graph.value_info}
    assert shapes[_concat(proto).output[0]] == [3, 9, 1, 1]
    assert_bit_equal(model, proto)


@pytest.mark.parametrize("shapes,axis,joined", [
    ([[3, 2, 4], [3, 2, 1]], 2, [3, 5, 2, 1]),
    ([[3, 2, 2, 3], [3, 2, 2, 3]], 3, [3, 6, 4, 1]),     # ICLabel's tiling of a batch of 4
    ([[3, 1, 1, 3], [3, 1, 1, 2]], -1, [3, 5, 1, 1])])
def test_a_batch_of_several_samples_keeps_axis_0_on_h_or_w(shapes, axis, joined):
    """Batch 3, ``a >= 2``: ``[3, P', 1, Q_i]`` transposed to ``[3, Q_i, P', 1]`` (each sample
    joined on its own, so a region can run in chunks)."""
    model = _joined(shapes, axis, batch=3)
    proto, _, changed = _views(model)
    assert changed
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in proto.graph.value_info}
    assert shapes[_concat(proto).output[0]] == joined
    assert_bit_equal(model, proto)


@pytest.mark.parametrize("shapes,axis,batch,constant", [
    ([[2, 3], [1, 3]], 0, 1, False),          # the leading axis
    ([[1, 4], [1, 4]], 1, 1, True),           # a constant piece
    ([[1, 2, 2, 3], [1, 2, 2, 3]], 1, 1, False),   # rank 4 on channels: the layer's own
    ([[1, 2, 1, 2, 3], [1, 2, 1, 2, 3]], 4, 1, False)])  # rank 5
def test_other_concats_are_left(shapes, axis, batch, constant):
    proto, _, changed = _views(_joined(shapes, axis, batch=batch, constant=constant))
    assert not changed
    assert [n.op_type for n in proto.graph.node].count("Reshape") == len(shapes)


def _int8_joined(shapes, axis, scales, dequantized=None):
    """``_joined``'s Concat in a QDQ model: input i through a Q/DQ pair of scale
    ``scales[i]`` (or none where ``dequantized[i]`` is False), the join through one of
    ``scales[-1]``."""
    b = Builder(seed=0, opset=14)
    zero = b.const(np.array(0, np.int8))
    parts = []
    for i, shape in enumerate(shapes):
        x = b.op("Relu", [b.input(f"x{i}", [1, int(np.prod(shape))])])
        x = b.op("Reshape", [x, b.const(np.array(shape, np.int64))])
        if dequantized is None or dequantized[i]:
            scale = b.const(np.array(scales[i], np.float32))
            x = b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, scale, zero]), scale, zero])
        parts.append(x)
    scale = b.const(np.array(scales[-1], np.float32))
    joined = b.op("Concat", parts, name="join", axis=axis)
    y = b.op("DequantizeLinear", [b.op("QuantizeLinear", [joined, scale, zero]), scale, zero])
    return b.model([b.op("Sigmoid", [y])])


@pytest.mark.parametrize("shapes,axis,views", [
    ([[1, 4, 3, 1], [1, 4, 3, 1]], 3, 6), ([[1, 2, 3, 2], [1, 2, 5, 2]], 2, 6),
    ([[5, 1, 4], [5, 1, 4]], 2, 6), ([[1, 4], [1, 3]], 1, 3)])
def test_an_int8_concat_gets_int8_views(shapes, axis, views):
    """Each view reads a DequantizeLinear and is read by a QuantizeLinear of the one grid the
    value is on (the int8 rules' reshape, layout_transform and Concat), and the QDQ model
    computes the same, bit for bit."""
    model = _int8_joined(shapes, axis, [0.01, 0.03, 0.02])
    proto, done, changed = _views(model)
    assert changed and "int8 views" in done.rewritten["join"]
    producers = {o: n for n in proto.graph.node for o in n.output}
    readers = {}
    for n in proto.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    scales = {i.name: float(np.asarray(onnx.numpy_helper.to_array(i))) for i in
              proto.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    moved = [n for n in proto.graph.node if n.op_type in ("Reshape", "Transpose", "Concat")
             and (n.name == "join" or done.derived.get(n.name) == "join")]
    assert len(moved) == 1 + views
    for n in moved:
        before = {producers[i].op_type for i in n.input if i in producers}
        [after] = readers[n.output[0]]
        assert before == {"DequantizeLinear"} and after.op_type == "QuantizeLinear", n.name
        grids = {scales[producers[i].input[1]] for i in n.input if i in producers}
        if n.op_type != "Concat":  # a view moves values of one grid, quantized on it again
            assert grids == {scales[after.input[1]]}, n.name
    assert_bit_equal(model, proto)


def test_a_concat_of_a_float_input_gets_float_views():
    model = _int8_joined([[1, 4, 3, 1], [1, 4, 3, 1]], 3, [0.01, 0.03, 0.02],
                         dequantized=[True, False])
    proto, done, changed = _views(model)
    assert changed and "int8" not in done.rewritten["join"]
    assert [n.op_type for n in proto.graph.node].count("QuantizeLinear") == 2
    assert_bit_equal(model, proto)


def test_an_int8_concat_of_one_grid_read_by_a_concat_ends_in_a_pair():
    """ICLabel's tiling after concat_sinking.py: a Concat on W of copies of one dequantized
    tensor, read by a channel Concat (no QuantizeLinear of its own). Its inputs are on one
    grid, so its output is: a pair of that grid after its last view, and the channel Concat
    reads a DequantizeLinear (an int8 Concat too); the QDQ model computes the same."""
    b = Builder(seed=0, opset=14)
    zero = b.const(np.array(0, np.int8))
    scales = [b.const(np.array(s, np.float32)) for s in (0.02, 0.05, 0.03)]

    def pair(x, scale):
        return b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, scale, zero]), scale, zero])

    x = b.op("Relu", [b.input("x", [1, 2, 3, 1])])
    tiled = b.op("Concat", [pair(x, scales[0]) for _ in range(4)], name="tile", axis=3)
    other = pair(b.op("Relu", [b.input("z", [1, 5, 3, 4])]), scales[1])
    both = b.op("Concat", [tiled, other], name="both", axis=1)
    model = b.model([b.op("Sigmoid", [pair(both, scales[2])])])
    proto, done, changed = _views(model)
    assert changed and "int8 views" in done.rewritten["tile"]
    producers = {o: n for n in proto.graph.node for o in n.output}
    [channel] = [n for n in proto.graph.node if n.name == "both"]
    assert {producers[i].op_type for i in channel.input} == {"DequantizeLinear"}
    assert_bit_equal(model, proto)


def test_an_int8_concat_of_two_grids_without_its_own_quantize_gets_float_views():
    b = Builder(seed=0, opset=14)
    zero = b.const(np.array(0, np.int8))
    parts = []
    for i, s in enumerate((0.02, 0.05)):
        scale = b.const(np.array(s, np.float32))
        x = b.op("Relu", [b.input(f"x{i}", [1, 2, 3, 1])])
        parts.append(b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, scale, zero]),
                                               scale, zero]))
    model = b.model([b.op("Sigmoid", [b.op("Concat", parts, name="join", axis=3)])])
    proto, done, changed = _views(model)
    assert changed and "int8" not in done.rewritten["join"]
    assert_bit_equal(model, proto)
