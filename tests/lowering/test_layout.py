"""NHWC layout: only the transposes that are needed, none that cancel, weights in the right order."""
from __future__ import annotations

import base64
import json

import numpy as np
import onnx
import pytest

import mrvl_convert
from support.models import Builder, run_ort, small_cnn


def mrvl_docs(result, out):
    for stage in result.manifest["stages"]:
        if stage["kind"] == "mrvl":
            yield (json.loads((out / stage["nodes_json"]).read_text()),
                   json.loads((out / stage["consts_json"]).read_text()))


def layer_names(doc):
    return [n["attrs"]["layer_name"][0] for n in doc["nodes"] if n["op"] == "tvm_op"]


def assert_no_cancelling_transposes(doc):
    nodes = doc["nodes"]
    for node in nodes:
        if node["op"] != "tvm_op" or node["attrs"]["layer_name"] != ["layout_transform"]:
            continue
        attrs = node["attrs"]
        assert attrs["src_layout"] != attrs["dst_layout"], node["name"]
        producer = nodes[node["inputs"][0][0]]
        assert producer["attrs"]["layer_name"] != ["layout_transform"], \
            f"{node['name']} undoes or chains {producer['name']}"


def decode(entry):
    return np.frombuffer(base64.b64decode(entry["data_base64"]), "<f4").reshape(entry["shape"])


@pytest.mark.parametrize("kwargs", [{}, {"keras_transpose": True}, {"sigmoid": True}])
@pytest.mark.parametrize("policy", ["single", "multi"])
def test_no_transpose_left_that_cancels_another(tmp_path, kwargs, policy):
    result = mrvl_convert.convert(small_cnn(**kwargs), tmp_path / "o", policy=policy)
    for doc, _ in mrvl_docs(result, tmp_path / "o"):
        assert_no_cancelling_transposes(doc)


def test_keras_transpose_before_flatten_is_gone(tmp_path):
    model = small_cnn(keras_transpose=True)
    result = mrvl_convert.convert(model, tmp_path / "o")
    ((doc, consts),) = mrvl_docs(result, tmp_path / "o")
    assert layer_names(doc) == ["layout_transform", "Conv2D", "Maxpool2D", "Conv2D", "Maxpool2D",
                                "nn.batch_flatten", "FC", "FC"]
    assert result.placement("to_nhwc")["placement"] == "mrvl"
    assert "absorbed" in result.placement("to_nhwc")["reason"]
    flatten = [n for n in doc["nodes"] if n["attrs"]["layer_name"] == ["nn.batch_flatten"]][0]
    assert flatten["attrs"]["data_layout"] == ["NHWC"]
    # The FC weights keep the model's order (just OI): NHWC data is what the model flattened.
    fc = [n for n in doc["nodes"] if n["attrs"]["layer_name"] == ["FC"]][0]
    init = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    gemm = [n for n in model.graph.node if n.op_type == "Gemm"][0]
    assert np.array_equal(decode(consts[fc["attrs"]["kernel_const_name"][0]]), init[gemm.input[1]])


def test_nchw_flatten_gets_permuted_weights_with_the_same_numbers(tmp_path):
    model = small_cnn()  # flattens the NCHW tensor directly
    result = mrvl_convert.convert(model, tmp_path / "o")
    ((doc, consts),) = mrvl_docs(result, tmp_path / "o")
    names = layer_names(doc)
    assert names.count("layout_transform") == 1, names  # only the input's
    fc = [n for n in doc["nodes"] if n["attrs"]["layer_name"] == ["FC"]][0]
    kernel = decode(consts[fc["attrs"]["kernel_const_name"][0]])
    # Feed the NHWC-flattened activation through our kernel and the NCHW one through the model's.
    extended = onnx.ModelProto()
    extended.CopyFrom(model)
    extended.graph.output.extend([onnx.helper.make_empty_tensor_value_info("pool2_out")])
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    pooled = run_ort(extended, feeds)["pool2_out"]
    init = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    gemm = [n for n in model.graph.node if n.op_type == "Gemm"][0]
    want = pooled.reshape(1, -1) @ init[gemm.input[1]].T
    got = pooled.transpose(0, 2, 3, 1).reshape(1, -1) @ kernel.T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(kernel, init[gemm.input[1]])


def test_channels_last_input_needs_no_layout_transform(tmp_path):
    b = Builder()
    x = b.input("x", [1, 16, 16, 3])
    y = b.op("Transpose", [x], name="to_nchw", perm=[0, 3, 1, 2])
    y = b.op("Relu", [b.conv(y, 3, 8, pads=[1, 1, 1, 1])], name="act")
    y = b.op("GlobalAveragePool", [y], name="gap")
    y = b.op("Flatten", [y], name="flat")
    y = b.gemm(y, 8, 4, transB=1)
    result = mrvl_convert.convert(b.model([y]), tmp_path / "o")
    ((doc, _),) = mrvl_docs(result, tmp_path / "o")
    assert layer_names(doc) == ["Conv2D", "GlobalAvgpool2D", "nn.batch_flatten", "FC"]
    assert doc["nodes"][0]["attrs"]["data_layout"] == ["NHWC"]
    assert result.manifest["stages"][0]["inputs"][0]["layout"] == "NHWC"


def test_tensors_leaving_a_mrvl_subgraph_are_back_in_onnx_layout(tmp_path):
    result = mrvl_convert.convert(small_cnn(sigmoid=True), tmp_path / "o", policy="multi")
    first, _ = next(mrvl_docs(result, tmp_path / "o"))
    head = first["nodes"][first["heads"][0][0]]
    assert head["attrs"]["layer_name"] == ["layout_transform"]
    assert head["attrs"]["dst_layout"] == ["NCHW"]
    assert result.manifest["stages"][0]["outputs"][0]["layout"] == "NCHW"
