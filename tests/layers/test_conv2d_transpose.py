"""Grouped ConvTranspose on layer set marvell (issue 17): written as a groups-1 Conv2DTranspose
with a block-diagonal kernel (layers/conv2d_transpose.py; princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
CreateCompositeMrvlConv2DTransposeLayer names a depthwise one Conv2D, so its grouped forms are
not followed)."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.kernels.conv_weights import block_diagonal
from mrvl_convert.rules.checks_shape import MAX_DENSE_TRANSPOSE_KERNEL
from support.layer_chains import convert_and_compare, the_layer
from support.models import Builder, run_ort


def _grouped(channels: int, out_per_group: int, groups: int, seed: int = 0, relu=True):
    b = Builder(opset=13, seed=seed)
    x = b.input("x", [1, 3, 6, 6])
    y = b.conv(x, 3, channels, pads=[1, 1, 1, 1])
    w = b.weight(channels, out_per_group, 3, 3)
    bias = b.const(np.linspace(-0.2, 0.2, out_per_group * groups).astype(np.float32))
    y = b.op("ConvTranspose", [y, w, bias], name="up", strides=[2, 2], pads=[1, 1, 0, 0],
             output_padding=[1, 1], group=groups)
    if relu:
        y = b.op("Relu", [y], name="up_relu")
    return b.model([b.conv(y, out_per_group * groups, 2, k=1)])


@pytest.mark.parametrize("channels,per_group,groups", [(4, 3, 2), (6, 1, 6), (8, 2, 4)])
def test_grouped_conv_transpose_runs_on_mrvl_within_fp16(tmp_path, channels, per_group, groups):
    result = convert_and_compare(_grouped(channels, per_group, groups), tmp_path)
    assert result.placement("up")["rule"] == "mrvl.conv2d_transpose"
    assert result.summary["cpu_nodes"] == 0


def test_grouped_attributes_are_groups_1_with_a_block_diagonal_kernel(tmp_path):
    model = _grouped(4, 3, 2)
    result = mrvl_convert.convert(model, tmp_path / "o")
    attrs = the_layer(result, "Conv2DTranspose")["attrs"]
    assert (attrs["groups"], attrs["channels"], attrs["kernel_size"]) == (["1"], ["6"],
                                                                          ["3", "3"])
    assert attrs["kernel_layout"] == ["OHWI"] and attrs["activation_type"] == ["relu"]
    consts = json.loads(next(p for p in result.files
                             if p.name.endswith("-consts.json")).read_text())
    entry = consts[attrs["kernel_const_name"][0]]
    kernel = np.frombuffer(base64.b64decode(entry["data_base64"]), np.float32)
    kernel = kernel.reshape(entry["shape"])                       # [O, KH, KW, I]
    assert entry["shape"] == [6, 3, 3, 4]
    # Group 0: inputs 0-1 -> outputs 0-2; group 1: inputs 2-3 -> outputs 3-5; zeros across.
    assert not kernel[:3, :, :, 2:].any() and not kernel[3:, :, :, :2].any()
    assert kernel[:3, :, :, :2].all() and kernel[3:, :, :, 2:].all()


@pytest.mark.parametrize("groups", [2, 4])
def test_block_diagonal_groups_1_equals_the_grouped_op_on_onnxruntime(groups):
    """The rewrite of the weight, run by onnxruntime itself: original vs block-diagonal."""
    rng = np.random.default_rng(groups)
    w = rng.standard_normal([8, 3, 3, 3]).astype(np.float32)
    feed = {"x": rng.standard_normal([1, 8, 5, 5]).astype(np.float32)}

    def model(weight, group):
        b = Builder(opset=13)
        x = b.input("x", [1, 8, 5, 5])
        return b.model([b.op("ConvTranspose", [x, b.const(weight)], strides=[2, 2],
                             group=group)])

    [want] = run_ort(model(w, groups), feed).values()
    [got] = run_ort(model(block_diagonal(w, groups), 1), feed).values()
    # Only exact zero products are added; onnxruntime may sum in another order.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()))


def test_a_grouped_transpose_too_large_to_expand_stays_on_cpu(tmp_path):
    channels = 2048                                  # depthwise 3x3: 2048 * 2048 * 9 values
    assert channels * channels * 9 > MAX_DENSE_TRANSPOSE_KERNEL
    b = Builder(opset=13)
    x = b.input("x", [1, 3, 1, 1])
    y = b.conv(x, 3, channels, k=1)
    y = b.op("ConvTranspose", [y, b.weight(channels, 1, 3, 3)], name="up", group=channels)
    result = mrvl_convert.convert(b.model([y]), tmp_path / "o")
    entry = result.placement("up")
    assert entry["placement"] == "cpu"
    assert entry["reason"] == (
        f"mrvl.conv2d_transpose: group={channels}: the block-diagonal groups-1 kernel would hold "
        f"{channels * channels * 9} values, above {MAX_DENSE_TRANSPOSE_KERNEL}")
