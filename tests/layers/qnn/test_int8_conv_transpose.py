"""int8 ConvTranspose (``mrvl.qnn_conv2d_transpose``, ``layers/qnn/conv_transpose.py``): a U-Net
whose upsampling is ConvTranspose, quantized with Marvell's recipe, is one Mrvl subgraph in int8
as in fp16, and its output is bit-equal to onnxruntime's run of the QDQ model as written; the
transposed convolution's geometries (stride, pads, output_padding, dilation, fused Relu, groups,
depthwise) each exact; one whose size comes from output_shape stays on CPU with the reason.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import mrvl_convert
from support.corpus_int8 import unet_transposed
from support.int8 import placements, quantized, run_both

RULE = "mrvl.qnn_conv2d_transpose"


def _stages(result):
    return [s["kind"] for s in result.manifest["stages"]]


def _cpu(result):
    return {n["name"]: n.get("reason") for n in result.report["nodes"]
            if n["placement"] == "cpu"}


def _layers(result, kind):
    nodes = json.loads(next(result.out_dir.glob("*-nodes.json")).read_text())["nodes"]
    return [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == [kind]]


def test_unet_with_conv_transpose_is_one_mrvl_subgraph_in_int8_bit_equal(tmp_path):
    model = unet_transposed()
    fp16 = mrvl_convert.convert(model, tmp_path / "fp16")
    assert _stages(fp16) == ["mrvl"]
    qdq, feeds = quantized(tmp_path, model, [1, 3, 32, 32], samples=8)
    result = mrvl_convert.convert(qdq, tmp_path / "int8")
    assert _stages(result) == ["mrvl"], _cpu(result)
    transposed = [n for n in placements(result).values() if n["op_type"] == "ConvTranspose"]
    assert len(transposed) == 2 and {n["rule"] for n in transposed} == {RULE}
    layers = _layers(result, "Conv2DTranspose")
    assert len(layers) == 2
    for attrs in layers:
        assert {"input_scale", "weight_scale", "output_scale"} <= set(attrs)
    assert "int8_forms" not in result.report, result.report["int8_forms"]
    got, want = run_both(qdq, result.out_dir, feeds)
    assert np.array_equal(got, want)


def _transposed_net(relu: bool, out_channels: int = 4, **geometry) -> onnx.ModelProto:
    """Conv 3->8 (8x8), ConvTranspose 8->``out_channels`` of ``geometry``, [Relu], Conv ->2
    (1x1)."""
    rng = np.random.default_rng(3)
    kh, kw = geometry.setdefault("kernel_shape", [3, 3])
    per_group = out_channels // geometry.get("group", 1)
    nodes = [onnx.helper.make_node("Conv", ["x", "w0", "b0"], ["h"], kernel_shape=[3, 3],
                                   pads=[1, 1, 1, 1]),
             onnx.helper.make_node("ConvTranspose", ["h", "wt", "bt"], ["t"], **geometry)]
    last = "t"
    if relu:
        nodes.append(onnx.helper.make_node("Relu", ["t"], ["r"]))
        last = "r"
    nodes.append(onnx.helper.make_node("Conv", [last, "w1", "b1"], ["y"], kernel_shape=[1, 1]))
    inits = {"w0": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b0": rng.standard_normal(8) * 0.1,
             "wt": rng.standard_normal((8, per_group, kh, kw)) * 0.3,
             "bt": rng.standard_normal(out_channels) * 0.1,
             "w1": rng.standard_normal((2, out_channels, 1, 1)) * 0.5, "b1": np.zeros(2)}
    graph = onnx.helper.make_graph(
        nodes, "transposed", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                 [1, 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)],
                                   ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


GEOMETRIES = {
    "stride2": dict(strides=[2, 2]),
    "stride2_pads_output_padding": dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    "dilated_asymmetric": dict(kernel_shape=[3, 2], dilations=[2, 1], pads=[0, 1, 1, 0]),
    "stride1_2x2": dict(kernel_shape=[2, 2]),
}


@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
def test_every_geometry_is_one_int8_layer_bit_equal(tmp_path, geometry, relu):
    qdq, feeds = quantized(tmp_path, _transposed_net(relu, **GEOMETRIES[geometry]), [1, 3, 8, 8],
                           samples=6)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert _stages(result) == ["mrvl"], _cpu(result)
    [attrs] = _layers(result, "Conv2DTranspose")
    assert attrs["rule"] == [RULE]
    got, want = run_both(qdq, result.out_dir, feeds)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("group", [2, 8], ids=["grouped", "depthwise"])
def test_a_grouped_conv_transpose_is_one_int8_layer_bit_equal(tmp_path, group):
    """Written as groups 1 with a block-diagonal kernel (as in float), run grouped again."""
    model = _transposed_net(False, strides=[2, 2], group=group, out_channels=8)
    qdq, feeds = quantized(tmp_path, model, [1, 3, 8, 8], samples=6)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert _stages(result) == ["mrvl"], _cpu(result)
    [attrs] = _layers(result, "Conv2DTranspose")
    assert attrs["rule"] == [RULE] and attrs["groups"] == ["1"]
    got, want = run_both(qdq, result.out_dir, feeds)
    assert np.array_equal(got, want)


def test_a_conv_transpose_with_output_shape_stays_on_cpu_with_the_rules_reason(tmp_path):
    model = _transposed_net(False, strides=[2, 2], output_shape=[16, 16])
    qdq, feeds = quantized(tmp_path, model, [1, 3, 8, 8], samples=3)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    [node] = [n for n in placements(result).values() if n["op_type"] == "ConvTranspose"]
    assert node["placement"] == "cpu"
    assert "output_shape is given: write explicit pads" in node.get("reason", ""), node
    got, want = run_both(qdq, result.out_dir, feeds)
    assert np.array_equal(got, want)


def test_a_bias_scale_the_json_cannot_state_is_named_in_int8_forms(tmp_path):
    """The ConvTranspose's int32 bias dequantized with another scale than input x weight scale
    (another quantizer's rounding, within the rule's 1e-5): the layer is named in int8_forms,
    exactness is not claimed for it."""
    qdq, _ = quantized(tmp_path, _transposed_net(False, strides=[2, 2]), [1, 3, 8, 8],
                       samples=1)
    model = onnx.load(qdq)
    conv = next(n for n in model.graph.node if n.op_type == "ConvTranspose")
    bias_dq = next(n for n in model.graph.node if n.output[0] == conv.input[2])
    scale = next(t for t in model.graph.initializer if t.name == bias_dq.input[1])
    value = onnx.numpy_helper.to_array(scale) * np.float32(1 + 2e-6)
    scale.CopyFrom(onnx.numpy_helper.from_array(value.astype(np.float32), scale.name))
    onnx.save(model, qdq)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    [entry] = result.report["int8_forms"]
    assert entry["layer_name"] == "Conv2DTranspose" and "bias scale" in entry["form"]
