"""The newer set's data-movement kinds through the converter: the attributes each layer is
written with (golden, as the newer codegen names them) and the hybrid run against onnxruntime.

Contracts: princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc ``CreateMrvlResize2DLayer``, ``CreateMrvlSplitLayer``,
``CreateCompositeMrvlStridedSliceLayer``, ``CreateMrvlConcatLayer``, ``CreateMrvlLayer4OpNode``
(transpose), ``CreateCompositeMrvlReduceLayer`` and ``CreateCompositeMrvlReduceMax``.
The kernels alone: tests/layers/test_data_movement_kernels.py.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import mrvl_convert
from support.layer_chains import convert_and_compare, layers, the_layer
from support.models import Builder


def placement(result, node: str) -> str:
    return next(e for e in result.report["nodes"] if e["name"] == node)["placement"]


def sandwich(op: str, inputs_after_x, shape=(1, 4, 6, 6), channels_out=None, **attrs):
    """Conv -> op -> Conv, so the op sits inside a Mrvl region."""
    b = Builder(opset=13)
    x = b.input("x", list(shape))
    y = b.conv(x, shape[1], shape[1], pads=[1, 1, 1, 1])
    y = b.op(op, [y, *inputs_after_x(b)], name="the_op", **attrs)
    return b, y


def test_resize2d_attributes_as_the_codegen_writes_them(tmp_path):
    """codegen.cc CreateMrvlResize2DLayer: Relay's Resize2DAttrs, NHWC, nearest_neighbor."""
    b, y = sandwich("Resize", lambda b: ["", b.const(np.array([1, 1, 2, 3], np.float32))],
                    mode="nearest", coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor")
    result = convert_and_compare(b.model([b.conv(y, 4, 4, pads=[1, 1, 1, 1])]), tmp_path)
    attrs = the_layer(result, "Resize2D")["attrs"]
    assert attrs["composite_name"] == ["mrvl.resize2d"]
    assert attrs["func_name"][0].endswith("_Resize2D_NHWC")
    assert attrs["size"] == ["12", "18"]
    assert (attrs["layout"], attrs["method"]) == (["NHWC"], ["nearest_neighbor"])
    assert attrs["coordinate_transformation_mode"] == ["asymmetric"]
    assert attrs["rounding_method"] == ["floor"]
    assert (attrs["data_layout_shape"], attrs["out_layout_shape"]) == (
        ["1", "6", "6", "4"], ["1", "12", "18", "4"])


def test_resize_not_integer_or_not_nearest_stays_on_cpu_with_the_reason(tmp_path):
    b = Builder(opset=13)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
    # A linear Resize at factor 2 is rewritten onto the accelerator (frontend/linear_resize.py).
    lin = b.op("Resize", [y, "", b.const(np.array([1, 1, 2, 2], np.float32))], name="cubic",
               mode="cubic")
    odd = b.op("Resize", [y, "", b.const(np.array([1, 1, 1.5, 1.5], np.float32))], name="odd",
               mode="nearest")
    three = b.op("Resize", [y, "", b.const(np.array([1, 1, 3, 3], np.float32))], name="three",
                 mode="nearest", coordinate_transformation_mode="asymmetric")
    result = mrvl_convert.convert(b.model([lin, odd, three]), tmp_path / "out")
    reasons = {e["name"]: e.get("reason", "") for e in result.report["nodes"]}
    assert "only nearest resizing" in reasons["cubic"]
    assert "[6, 6] -> [9, 9] is not an integer upscale" in reasons["odd"]
    assert "does not read in[i // s]" in reasons["three"]


@pytest.mark.parametrize("rounding,on_mrvl", [("ceil", False), ("floor", False),
                                              ("round_prefer_ceil", True)])
def test_half_pixel_resize_maps_only_with_rounding_to_nearest(tmp_path, rounding, on_mrvl):
    """half_pixel at factor 2 puts output 1 at 0.25: ceil reads input 1, not 1 // 2 (found by
    the backend case test_resize_upsample_sizes_nearest_ceil_half_pixel)."""
    b, y = sandwich("Resize", lambda b: ["", b.const(np.array([1, 1, 2, 2], np.float32))],
                    mode="nearest", coordinate_transformation_mode="half_pixel",
                    nearest_mode=rounding)
    model = b.model([b.conv(y, 4, 4, pads=[1, 1, 1, 1])])
    if on_mrvl:
        result = convert_and_compare(model, tmp_path)
        assert placement(result, "the_op") == "mrvl"
        return
    result = mrvl_convert.convert(model, tmp_path / "out")
    entry = next(e for e in result.report["nodes"] if e["name"] == "the_op")
    assert entry["placement"] == "cpu"
    assert f"'half_pixel' with nearest_mode {rounding!r} does not read in[i // s]" in \
        entry["reason"]


def test_split_is_one_layer_with_an_output_per_piece(tmp_path):
    """codegen.cc CreateMrvlSplitLayer: `axis`, num_outputs, out_layout_shape_<i>; consumers
    read [split, i, 0] with from_tuple_idx i."""
    b, y = sandwich("Split", lambda b: [b.const(np.array([1, 3], np.int64))], outputs=2, axis=1)
    second = "the_op_out1"
    h = b.conv(second, 3, 3, pads=[1, 1, 1, 1])
    out = b.op("Concat", [y, h, second], axis=1)
    result = convert_and_compare(b.model([b.conv(out, 7, 4, pads=[1, 1, 1, 1])]), tmp_path)
    split = the_layer(result, "Split")
    attrs = split["attrs"]
    assert attrs["axis"] == ["3"] and attrs["num_outputs"] == "2"
    assert attrs["shape"] == [[1, 6, 6, 1], [1, 6, 6, 3]]
    assert attrs["out_layout_shape_0"] == attrs["out_layout_shape"] == ["1", "6", "6", "1"]
    assert attrs["out_layout_shape_1"] == ["1", "6", "6", "3"]
    index = [n["name"] for n in layers(result)].index(split["name"]) + 1  # + the input node
    concat = the_layer(result, "Concat")
    assert concat["inputs"][0] == [index, 0, 0] and concat["inputs"][2] == [index, 1, 0]
    assert concat["attrs"]["from_tuple_idx"] == ["0", "-1", "1"]
    assert placement(result, "the_op") == "mrvl"


def test_split_output_leaving_the_region_is_handed_back_in_onnx_layout(tmp_path):
    b, y = sandwich("Split", lambda b: [b.const(np.array([2, 2], np.int64))], outputs=2, axis=1)
    result = convert_and_compare(b.model([b.conv(y, 2, 2), "the_op_out1"]), tmp_path)
    assert placement(result, "the_op") == "mrvl"


def test_strided_slice_attributes_as_the_codegen_writes_them(tmp_path):
    """codegen.cc CreateCompositeMrvlStridedSliceLayer: StridedSliceAttrs, one value per
    physical (NHWC) axis."""
    b, y = sandwich("Slice", lambda b: [b.const(np.array([1, -5], np.int64)),
                                        b.const(np.array([3, 100], np.int64)),
                                        b.const(np.array([1, 3], np.int64)),
                                        b.const(np.array([1, 2], np.int64))])
    result = convert_and_compare(b.model([b.conv(y, 2, 2)]), tmp_path)
    attrs = the_layer(result, "StridedSlice")["attrs"]
    assert attrs["begin"] == ["0", "0", "1", "1"]
    assert attrs["end"] == ["1", "6", "6", "3"]
    assert attrs["strides"] == ["1", "1", "2", "1"]
    assert attrs["slice_mode"] == ["end"]
    assert attrs["out_layout_shape"] == ["1", "6", "3", "2"]


def test_concat_in_the_newer_set_is_4d_and_batch_1(tmp_path):
    """codegen.cc CreateMrvlConcatLayer writes `axis` (3 for NHWC); the newer mrvl.py takes
    4-D, batch 1, channel axis only (a batch 2 made inside the model, not its own batch: no
    runs in chunks of 1, rules/batch_axis.py)."""
    b = Builder(opset=13)
    x = b.input("x", [1, 4, 6, 6])
    y = b.conv(b.op("Concat", [x, x], axis=0), 4, 4, pads=[1, 1, 1, 1])
    cat = b.op("Concat", [y, y], name="cat", axis=1)
    model = b.model([b.conv(cat, 8, 4)])
    newer = mrvl_convert.convert(model, tmp_path / "newer")
    reason = next(e for e in newer.report["nodes"] if e["name"] == "cat")["reason"]
    assert "batch 1 only; this batch is 2" in reason
    older = mrvl_convert.convert(model, tmp_path / "older", layer_set="upstream-0.19")
    assert placement(older, "cat") == "mrvl"


def test_transpose_attributes_and_the_free_layout_change(tmp_path):
    """codegen.cc CreateMrvlLayer4OpNode: a bare transpose writes `axes`, src_layout and
    dst_layout NHWC; an NCHW<->NHWC Transpose stays a free relabelling."""
    b, y = sandwich("Transpose", lambda b: [], perm=[0, 1, 3, 2])
    result = convert_and_compare(b.model([b.conv(y, 4, 4, pads=[1, 1, 1, 1])]), tmp_path)
    attrs = the_layer(result, "transpose")["attrs"]
    # NHWC in, NHWC out, H and W swapped: physical axes [0, 2, 1, 3]
    assert attrs["axes"] == ["0", "2", "1", "3"]
    assert (attrs["src_layout"], attrs["dst_layout"]) == (["NHWC"], ["NHWC"])
    assert (attrs["data_layout"], attrs["out_layout"]) == (["NHWC"], ["NHWC"])
    assert attrs["composite_name"] == ["mrvl.transpose"]


def test_transpose_of_3_axes_after_a_reshape(tmp_path):
    """As a detector head writes it: Reshape to [N, C, H*W], Transpose to [N, H*W, C]."""
    b, y = sandwich("Reshape", lambda b: [b.const(np.array([1, 4, 36], np.int64))])
    y = b.op("Transpose", [y], name="tr", perm=[0, 2, 1])
    result = convert_and_compare(b.model([b.matmul_add(y, 4, 3)]), tmp_path)
    assert placement(result, "tr") == "mrvl"
    assert the_layer(result, "transpose")["attrs"]["axes"] == ["0", "2", "1"]


@pytest.mark.parametrize("axis,keep", [(1, 1), (2, 0)])
def test_reduce_mean_attributes_are_r4_with_a_normalised_axis(tmp_path, axis, keep):
    """codegen.cc CreateCompositeMrvlReduceLayer: `axis` normalised (physical), ReduceAttrs'
    keepdims, R4 layout shapes."""
    b, y = sandwich("ReduceMean", lambda b: [], axes=[axis - 4], keepdims=keep)
    result = convert_and_compare(b.model([y]), tmp_path)
    attrs = the_layer(result, "ReduceMean")["attrs"]
    assert attrs["axis"] == [{1: "3", 2: "1"}[axis]]
    assert attrs["keepdims"] == [str(keep)]
    assert attrs["data_layout"] == attrs["out_layout"] == ["NHWC"]
    assert attrs["data_layout_shape"] == ["1", "6", "6", "4"]
    assert len(attrs["out_layout_shape"]) == 4


def test_reduce_mean_over_h_and_w_is_a_global_average_pool(tmp_path):
    b, y = sandwich("ReduceMean", lambda b: [], axes=[2, 3], keepdims=1)
    result = convert_and_compare(b.model([y]), tmp_path)
    assert the_layer(result, "GlobalAvgpool2D")["attrs"]["composite_name"] == [
        "mrvl.reduce_mean_global"]


def test_reduce_max_of_a_3d_tensor(tmp_path):
    """codegen.cc CreateCompositeMrvlReduceMax: `axis` normalised, R4 (3-D padded to 4-D)."""
    b, y = sandwich("Reshape", lambda b: [b.const(np.array([1, 4, 36], np.int64))])
    y = b.op("ReduceMax", [y], name="rmax", axes=[-1], keepdims=1)
    result = convert_and_compare(b.model([y]), tmp_path)
    attrs = the_layer(result, "ReduceMax")["attrs"]
    assert attrs["axis"] == ["2"]
    assert attrs["data_layout_shape"] == ["1", "4", "36", "1"]
    assert attrs["out_layout_shape"] == ["1", "4", "1", "1"]


def test_upstream_set_keeps_the_newer_kinds_off_the_accelerator(tmp_path):
    b, y = sandwich("Resize", lambda b: ["", b.const(np.array([1, 1, 2, 2], np.float32))],
                    mode="nearest")
    result = mrvl_convert.convert(b.model([b.conv(y, 4, 4)]), tmp_path / "out",
                                  layer_set="upstream-0.19")
    assert placement(result, "the_op") == "cpu"
    assert not [n for n in layers(result) if n["attrs"]["layer_name"] == ["Resize2D"]]


def test_conv2d_transpose_attributes_and_constants(tmp_path):
    """codegen.cc CreateCompositeMrvlConv2DTransposeLayer: Conv2DTransposeAttrs, OHWI kernel,
    bias ---O, fused relu."""
    b = Builder(opset=13)
    x = b.input("x", [1, 4, 5, 5])
    y = b.conv(x, 4, 6, pads=[1, 1, 1, 1])
    w = b.weight(6, 3, 3, 2)
    y = b.op("ConvTranspose", [y, w, b.const(np.full(3, 0.1, np.float32))], name="up",
             strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 0])
    y = b.op("Relu", [y], name="up_relu")
    result = convert_and_compare(b.model([b.conv(y, 3, 2)]), tmp_path)
    layer = the_layer(result, "Conv2DTranspose")
    attrs = layer["attrs"]
    assert attrs["composite_name"] == ["mrvl.conv2d_transpose"]
    assert attrs["strides"] == ["2", "2"] and attrs["padding"] == ["1", "0", "0", "1"]
    assert attrs["output_padding"] == ["1", "0"] and attrs["dilation"] == ["1", "1"]
    assert (attrs["groups"], attrs["channels"], attrs["kernel_size"]) == (["1"], ["3"],
                                                                          ["3", "2"])
    assert (attrs["kernel_layout"], attrs["bias_layout"]) == (["OHWI"], ["---O"])
    assert attrs["activation_type"] == ["relu"]
    assert attrs["kernel_const"]["shape"] == [3, 3, 2, 6]
    assert attrs["bias_const"]["shape"] == [1, 1, 1, 3]
    assert layer["attrs"]["source_nodes"] == ["up", "up_relu"]


def test_batch_matmul_with_a_constant_operand(tmp_path):
    """codegen.cc CreateCompositeMrvlBatchMatmulLayer: NCHW, 4-D shapes with leading 1s,
    input_const_name + input_const_shape for the constant second operand."""
    b, y = sandwich("Reshape", lambda b: [b.const(np.array([1, 4, 36], np.int64))])
    # A 3-D constant: a 2-D one on a 3-D token tensor is an FC (CreateCompositeMrvlFcLayer).
    y = b.op("MatMul", [y, b.weight(1, 36, 5)], name="bmm")
    result = convert_and_compare(b.model([y]), tmp_path)
    layer = the_layer(result, "BatchMatmul")
    attrs = layer["attrs"]
    assert attrs["composite_name"] == ["mrvl.batch_matmul"]
    assert attrs["data_layout"] == attrs["out_layout"] == ["NCHW"]
    assert attrs["data_layout_shape"] == ["1", "1", "4", "36"]
    assert attrs["out_layout_shape"] == ["1", "1", "4", "5"]
    assert attrs["input_const_shape"] == ["1", "1", "36", "5"]
    assert attrs["input_const"]["shape"] == [1, 36, 5] and attrs["num_inputs"] == "2"


def test_batch_matmul_of_two_activations(tmp_path):
    """Attention-like: x @ x^T of a 3-D activation, both operands from the model."""
    b, y = sandwich("Reshape", lambda b: [b.const(np.array([1, 4, 36], np.int64))])
    t = b.op("Transpose", [y], name="t", perm=[0, 2, 1])
    y = b.op("MatMul", [y, t], name="bmm")
    result = convert_and_compare(b.model([y]), tmp_path)
    attrs = the_layer(result, "BatchMatmul")["attrs"]
    assert attrs["data_layout_shape_0"] == ["1", "1", "4", "36"]
    assert attrs["data_layout_shape_1"] == ["1", "1", "36", "4"]
    assert "input_const_name" not in attrs


def test_expand_dims_attributes_as_the_codegen_writes_them(tmp_path):
    """codegen.cc CreateMrvlExpandDimsLayer: GENERIC layouts, no op attributes."""
    b, y = sandwich("GlobalAveragePool", lambda b: [])
    y = b.op("Flatten", [y], name="flat")
    y = b.op("Unsqueeze", [y, b.const(np.array([2], np.int64))], name="unsq")
    bad = b.op("Unsqueeze", [y, b.const(np.array([3, 4], np.int64))], name="unsq_rank5")
    result = convert_and_compare(b.model([y, bad]), tmp_path)
    attrs = the_layer(result, "expand_dims")["attrs"]
    assert attrs["data_layout"] == attrs["out_layout"] == ["GENERIC"]
    assert attrs["composite_name"] == ["mrvl.expand_dims"]
    assert (attrs["data_layout_shape"], attrs["out_layout_shape"]) == (["1", "4"],
                                                                       ["1", "4", "1"])
    assert placement(result, "unsq_rank5") == "cpu"
    assert "ranks 3 -> 5" in next(e for e in result.report["nodes"]
                                  if e["name"] == "unsq_rank5")["reason"]


@pytest.mark.parametrize("perm,count", [([0, 3, 2, 1], 1), ([0, 2, 1, 3], 1), ([0, 1, 3, 2], 1),
                                        ([0, 3, 1, 2], 0)])
def test_transpose_of_4_axes_matches_onnxruntime(tmp_path, perm, count):
    b = Builder(opset=13)
    x = b.input("x", [1, 4, 5, 6])
    y = b.op("Transpose", [b.conv(x, 4, 4, pads=[1, 1, 1, 1])], name="tr", perm=perm)
    channels = [4, 5, 6][perm[1] - 1]
    result = convert_and_compare(b.model([b.conv(y, channels, 3)]), tmp_path)
    assert placement(result, "tr") == "mrvl"
    kinds = [n["attrs"]["layer_name"][0] for n in layers(result)]
    # an NCHW<->NHWC perm is a free relabelling (mrvl.layout_transform), any other one layer
    assert kinds.count("transpose") == count


def test_upsample_of_opset_9_is_resize2d(tmp_path):
    b = Builder(opset=9)
    x = b.input("x", [1, 4, 5, 5])
    y = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
    y = b.op("Upsample", [y, b.const(np.array([1, 1, 2, 2], np.float32))], name="up",
             mode="nearest")
    result = convert_and_compare(b.model([b.conv(y, 4, 4)]), tmp_path)
    assert the_layer(result, "Resize2D")["attrs"]["size"] == ["10", "10"]


def test_reduce_mean_over_the_batch_says_why_it_stays_and_a_2d_concat_runs_on_4d_views(
        tmp_path):
    b = Builder(opset=13)
    x = b.input("x", [1, 4, 5, 6])
    y = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
    w = b.op("ReduceMean", [y], name="mean_w", axes=[0], keepdims=1)
    flat = b.op("Flatten", [b.op("GlobalAveragePool", [y])], name="flat")
    cat = b.op("Concat", [flat, flat], name="cat2d", axis=1)
    result = mrvl_convert.convert(b.model([w, cat]), tmp_path / "out")
    reasons = {e["name"]: e.get("reason", "") for e in result.report["nodes"]}
    assert "reduces the batch axis 0" in reasons["mean_w"]
    # a 2-D Concat is a channel Concat of its 4-D views (frontend/concat_views.py)
    assert result.placement("cat2d")["placement"] == "mrvl", reasons["cat2d"]


def test_simulator_refuses_a_reference_to_an_output_a_layer_does_not_have(tmp_path):
    from mrvl_convert.errors import ArtifactError
    from mrvl_convert.runtime import MrvlSimulator
    b, y = sandwich("Split", lambda b: [b.const(np.array([2, 2], np.int64))], outputs=2, axis=1)
    y = b.op("Concat", [y, "the_op_out1"], axis=1)
    result = convert_and_compare(b.model([b.conv(y, 4, 4)]), tmp_path)
    stage = next(s for s in result.manifest["stages"] if s["kind"] == "mrvl")
    path = result.out_dir / stage["nodes_json"]
    doc = json.loads(path.read_text())
    concat = next(n for n in doc["nodes"] if n["attrs"].get("layer_name") == ["Concat"])
    concat["inputs"][1][1] = 2
    path.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="has 2 output"):
        MrvlSimulator().compile(path, result.out_dir / stage["consts_json"])


def test_split_and_slice_of_2d_features(tmp_path):
    """2-D (NC) Split and StridedSlice between FC layers: axis 1 is the physical axis 1."""
    b = Builder(opset=13)
    x = b.input("x", [1, 4, 6, 6])
    y = b.op("Flatten", [b.op("GlobalAveragePool", [b.conv(x, 4, 8)])], name="flat")
    y = b.gemm(y, 8, 8, transB=1)
    first = b.op("Split", [y, b.const(np.array([3, 5], np.int64))], name="split2d", outputs=2,
                 axis=1)
    part = b.op("Slice", [y, b.const(np.array([1], np.int64)), b.const(np.array([7], np.int64)),
                          b.const(np.array([1], np.int64)), b.const(np.array([2], np.int64))],
                name="slice2d")
    y = b.op("Concat", [b.gemm(first, 3, 2, transB=1), b.gemm("split2d_out1", 5, 2, transB=1),
                        b.gemm(part, 3, 2, transB=1)], name="cat2d", axis=1)
    result = convert_and_compare(b.model([y]), tmp_path)
    assert placement(result, "split2d") == placement(result, "slice2d") == "mrvl"
    assert the_layer(result, "Split")["attrs"]["axis"] == ["1"]
    sliced = the_layer(result, "StridedSlice")["attrs"]
    assert (sliced["begin"], sliced["end"], sliced["strides"]) == (["0", "1"], ["1", "7"],
                                                                   ["1", "2"])
