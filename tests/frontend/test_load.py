"""Models from many exporters: old and new opsets, old IR, Constant nodes, dynamic dims."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import mrvl_convert
from mrvl_convert.errors import InvalidModelError
from mrvl_convert.frontend.load import INFERENCE_READS, MAX_OPSET, MIN_OPSET, load_model
from support.models import Builder


def plain_cnn(opset: int, *, ir_version: int = 8, batch_dim=1) -> onnx.ModelProto:
    b = Builder(opset=opset)
    x = b.input("x", [batch_dim, 3, 8, 8])
    y = b.op("Relu", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])], name="act")
    y = b.op("MaxPool", [y], name="pool", kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Flatten", [y], name="flat", axis=1)
    y = b.gemm(y, 64, 10, transB=1)
    graph = helper.make_graph(b.nodes, "plain", b.inputs,
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [batch_dim, 10])], b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=ir_version)


@pytest.mark.parametrize("opset", range(MIN_OPSET, MAX_OPSET + 1))
def test_every_supported_opset_converts(tmp_path, opset):
    ir = max(3, helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))
    result = mrvl_convert.convert(plain_cnn(opset, ir_version=ir), tmp_path / "o")
    assert result.summary["cpu_nodes"] == 0
    assert result.summary["mrvl_subgraphs"] == 1


def test_old_ir_with_initializers_listed_as_inputs(tmp_path):
    model = plain_cnn(7, ir_version=3)
    model.graph.input.extend(
        helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
        for i in model.graph.initializer)
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert [i["name"] for i in result.manifest["model"]["inputs"]] == ["x"]
    assert result.summary["cpu_nodes"] == 0


def test_constant_nodes_instead_of_initializers(tmp_path):
    model = plain_cnn(13)
    for init in list(model.graph.initializer):
        model.graph.node.insert(0, helper.make_node("Constant", [], [init.name], value=init,
                                                    name=f"const_{init.name}"))
    del model.graph.initializer[:]
    result = mrvl_convert.convert(model, tmp_path / "o")
    constants = [e for e in result.report["nodes"] if e["op_type"] == "Constant"]
    assert constants and all(e["placement"] == "removed" for e in constants)
    assert all("initializer" in e["reason"] for e in constants)
    assert result.summary["cpu_nodes"] == 0


def test_shape_subgraph_is_folded(tmp_path):
    b = Builder()
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("Relu", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])], name="act")
    shape = b.op("Shape", [y], name="shape")
    first = b.op("Gather", [shape, b.const(np.array([0], np.int64))], name="gather", axis=0)
    target = b.op("Concat", [first, b.const(np.array([-1], np.int64))], name="cat", axis=0)
    y = b.op("Reshape", [y, target], name="reshape")
    y = b.gemm(y, 256, 10, transB=1)
    result = mrvl_convert.convert(b.model([y], shapes={y: [1, 10]}), tmp_path / "o")
    for name in ("shape", "gather", "cat"):
        assert result.placement(name)["placement"] == "removed"
        assert "constant folding" in result.placement(name)["reason"]
    assert result.placement("reshape")["placement"] == "mrvl"


def test_dynamic_batch_fixed_by_shapes(tmp_path):
    model = plain_cnn(13, batch_dim="N")
    with pytest.raises(mrvl_convert.ShapeError) as info:
        mrvl_convert.convert(model, tmp_path / "o")
    assert "'x'" in str(info.value) and "dynamic dim 0 ('N')" in str(info.value)
    assert "--input-shape" in str(info.value)
    assert not (tmp_path / "o").exists()
    result = mrvl_convert.convert(model, tmp_path / "o", shapes={"x": [2, 3, 8, 8]})
    assert result.manifest["stages"][0]["inputs"][0]["shape"] == [2, 3, 8, 8]
    assert result.manifest["options"]["shapes"] == {"x": [2, 3, 8, 8]}


@pytest.mark.parametrize("shapes,message", [
    ({"y": [1, 3, 8, 8]}, "names 'y', which is not a graph input"),
    ({"x": [1, 3, 8]}, "has rank 4 but the given shape [1, 3, 8] has rank 3"),
    ({"x": [1, 4, 8, 8]}, "gets 4 channels where its weight takes 3"),
    ({"x": [0, 3, 8, 8]}, "must have positive dims"),
])
def test_bad_shape_overrides(tmp_path, shapes, message):
    model = plain_cnn(13, batch_dim="N")
    with pytest.raises(mrvl_convert.ShapeError, match=None) as info:
        mrvl_convert.convert(model, tmp_path / "o", shapes=shapes)
    assert message in str(info.value)


def test_converting_twice_gives_identical_bytes(tmp_path):
    from support.models import small_cnn
    model = small_cnn(sigmoid=True)
    a = mrvl_convert.convert(model, tmp_path / "a")
    b = mrvl_convert.convert(model, tmp_path / "b")
    assert [p.name for p in a.files] == [p.name for p in b.files]
    for x, y in zip(a.files, b.files):
        assert x.read_bytes() == y.read_bytes(), x.name


def test_model_given_as_path_and_as_proto_agree(tmp_path):
    from support.models import small_cnn
    model = small_cnn()
    path = tmp_path / "small.onnx"
    onnx.save(model, str(path))
    by_path = mrvl_convert.convert(path, tmp_path / "p")
    assert by_path.model_name == "small"
    by_proto = mrvl_convert.convert(model, tmp_path / "q", name="small")
    for x, y in zip(by_path.files, by_proto.files):
        if x.name != "manifest.json":  # the manifest records the file's own hash
            assert x.read_bytes() == y.read_bytes(), x.name


def test_paddle_minus_one_batch_is_a_dynamic_dim(tmp_path):
    """Paddle writes a dynamic batch as ``dim_value: -1`` on inputs and outputs alike."""
    model = plain_cnn(13, batch_dim=-1)
    with pytest.raises(mrvl_convert.ShapeError) as info:
        mrvl_convert.convert(model, tmp_path / "o")
    assert "dynamic dim 0 ('-1')" in str(info.value) and "--input-shape" in str(info.value)
    result = mrvl_convert.convert(model, tmp_path / "o", shapes={"x": [2, 3, 8, 8]})
    assert result.manifest["model"]["inputs"][0]["shape"] == [2, 3, 8, 8]
    assert result.manifest["model"]["outputs"][0]["shape"] == [2, 10]
    shapes = [b["shape"] for s in result.manifest["stages"] for b in s["inputs"] + s["outputs"]]
    assert all(d > 0 for shape in shapes for d in shape)
    assert result.summary["cpu_nodes"] == 0


def test_a_zero_dim_is_named_as_written_not_called_dynamic(tmp_path):
    model = plain_cnn(13, batch_dim=0)
    with pytest.raises(mrvl_convert.ShapeError) as info:
        mrvl_convert.convert(model, tmp_path / "o")
    text = str(info.value)
    assert "dim 0 of size 0" in text and "dynamic" not in text and "--input-shape" in text
    assert not (tmp_path / "o").exists()


def test_shape_inference_leaves_every_weight_as_it_was(tmp_path):
    """Initializers larger than INFERENCE_READS go to shape inference without their data; the
    loaded model has them back, byte for byte, and the shapes inferred."""
    from support.badmodels import small_cnn
    model = small_cnn(3, channels=16, size=16)
    sizes = [int(np.prod(t.dims)) for t in model.graph.initializer]
    assert min(sizes) <= INFERENCE_READS < max(sizes)  # both kinds are in the model
    loaded = load_model(model)
    assert [t.SerializeToString() for t in loaded.proto.graph.initializer] == \
        [t.SerializeToString() for t in model.graph.initializer]
    inferred = {v.name for v in loaded.proto.graph.value_info}
    assert {o for n in model.graph.node for o in n.output} - {o.name for o in model.graph.output} \
        <= inferred


@pytest.mark.parametrize("named", [True, False])
def test_the_checker_refuses_a_model_read_from_a_file(tmp_path, named):
    """Named nodes: the checker reads the bytes read; an unnamed node (named here): the model
    as named. Either way a Conv without its weight is refused."""
    from support import badmodels
    model = badmodels.checker_failure()
    if not named:
        model.graph.node[1].name = ""
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    with pytest.raises(InvalidModelError, match="fails the ONNX checker"):
        load_model(path)
