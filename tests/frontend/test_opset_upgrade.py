"""opset_upgrade.py: an old-opset model brought to opset 11 by onnx's version converter."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.convert import convert
from mrvl_convert.errors import MrvlConvertError, UnsupportedModelError
from mrvl_convert.frontend import opset_upgrade
from mrvl_convert.frontend.load import load_model
from mrvl_convert.quantize.recipe import Quantization
from mrvl_convert.verify.compare import compare


def _weights(rng, *shape):
    return (rng.standard_normal(shape) * 0.2).astype(np.float32)


def waifu2x_style(opset: int = 9) -> onnx.ModelProto:
    """Conv/LeakyRelu with an unpadded Conv, a border crop written as an opset-9 Slice
    (starts/ends attributes), an opset-9 Upsample and a Clip with min/max attributes."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(_weights(rng, 8, 3, 3, 3), "w0"),
             numpy_helper.from_array(_weights(rng, 8, 8, 3, 3), "w1"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0"),
             helper.make_node("LeakyRelu", ["c0"], ["r0"], alpha=0.1, name="lrelu0"),
             helper.make_node("Slice", ["r0"], ["s0"], starts=[1, 1], ends=[-1, -1], axes=[2, 3],
                              name="crop"),
             helper.make_node("Upsample", ["s0", "scales"], ["u0"], mode="nearest", name="up"),
             helper.make_node("Conv", ["u0", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Clip", ["c1"], ["y"], min=0.0, max=1.0, name="clip")]
    graph = helper.make_graph(
        nodes, "waifu2x_style", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [1, 3, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 4
    onnx.checker.check_model(model)
    return model


def super_resolution(opset: int = 8) -> onnx.ModelProto:
    """The classic super-resolution net (Conv/BN/Relu, a pixel shuffle as Reshape/Transpose/
    Reshape) as an old exporter wrote it: IR 3, the weights listed as graph inputs too."""
    rng = np.random.default_rng(1)
    inits, nodes, x = [], [], "input"
    for i, (ci, co, k) in enumerate([(1, 16, 5), (16, 16, 3), (16, 4, 3)]):
        inits += [numpy_helper.from_array(_weights(rng, co, ci, k, k), f"convolution{i}_W"),
                  numpy_helper.from_array(_weights(rng, co), f"convolution{i}_B")]
        nodes.append(helper.make_node("Conv", [x, f"convolution{i}_W", f"convolution{i}_B"],
                                      [f"c{i}"], kernel_shape=[k, k], pads=[k // 2] * 4))
        x = f"c{i}"
        if i == 0:  # a BatchNormalization the int8 recipe folds into the Conv
            stats = [np.ones(co), np.zeros(co), np.zeros(co), np.ones(co)]
            inits += [numpy_helper.from_array(v.astype(np.float32), f"bn_{j}")
                      for j, v in enumerate(stats)]
            nodes.append(helper.make_node("BatchNormalization", [x] + [f"bn_{j}" for j in
                                                                       range(4)], ["n0"]))
            x = "n0"
        if i < 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    inits += [numpy_helper.from_array(np.array([1, 1, 2, 2, 16, 16], np.int64), "shape1"),
              numpy_helper.from_array(np.array([1, 1, 32, 32], np.int64), "shape2")]
    nodes += [helper.make_node("Reshape", [x, "shape1"], ["rs"]),
              helper.make_node("Transpose", ["rs"], ["tr"], perm=[0, 1, 4, 2, 5, 3]),
              helper.make_node("Reshape", ["tr", "shape2"], ["output"])]
    graph = helper.make_graph(
        nodes, "super_resolution",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 16, 16])] +
        [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, 32, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@pytest.mark.parametrize("build, shape", [(waifu2x_style, (1, 3, 20, 20)),
                                          (super_resolution, (1, 1, 16, 16))])
def test_the_converted_model_computes_what_the_given_one_did_bit_for_bit(build, shape):
    model = build()
    upgrade = opset_upgrade.upgrade_opset(model, model.opset_import[0].version)
    assert upgrade.used == 11 and "converted" in upgrade.note
    assert upgrade.model.opset_import[0].version == 11
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(_run(upgrade.model, x), _run(model, x))


def test_it_keeps_the_models_node_and_tensor_names():
    loaded = load_model(waifu2x_style())
    assert [n.name for n in loaded.proto.graph.node] == ["conv0", "lrelu0", "crop", "up", "conv1",
                                                         "clip"]
    assert [n.op_type for n in loaded.proto.graph.node][2:4] == ["Slice", "Resize"]
    assert loaded.proto.graph.node[3].output[0] == "u0"
    assert loaded.opset == {"given": 9, "used": 11, "note": loaded.opset["note"]}


def test_an_opset_9_network_is_one_mrvl_subgraph_and_verifies(tmp_path):
    """On main the opset-9 Slice ("starts as an attribute") stays on the CPU: 2 Mrvl parts."""
    model = waifu2x_style()
    result = convert(model, tmp_path / "a")
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    assert result.report["opset"]["used"] == 11
    assert compare(model, result.out_dir).passed


def test_where_the_converter_fails_the_model_is_converted_as_given(tmp_path, monkeypatch):
    def refuse(model, target):
        raise RuntimeError("no adapter for op Upsample")
    monkeypatch.setattr(opset_upgrade.version_converter, "convert_version", refuse)
    result = convert(waifu2x_style(), tmp_path / "a")
    note = result.report["opset"]["note"]
    assert note.startswith("kept at opset 9") and "no adapter for op Upsample" in note
    assert result.report["opset"]["used"] == 9
    assert result.summary["mrvl_subgraphs"] >= 1  # the old forms, as before: not an error


def test_a_model_from_opset_11_on_is_not_touched():
    model = super_resolution(opset=11)
    upgraded = opset_upgrade.upgrade_opset(model, 11)
    assert upgraded.model is model and upgraded.note is None
    assert load_model(model).opset == {}


def _calibration():
    return {"input": np.random.default_rng(0).random((4, 1, 16, 16)).astype(np.float32)}


def test_an_opset_8_super_resolution_net_quantizes(tmp_path):
    """Finding 7: onnxruntime's quantize_static converted the BN-folded IR-3 model itself and
    stopped with onnx's internal 'Input ..._bn_folded_W is undefined!'."""
    result = convert(super_resolution(), tmp_path / "a",
                     quantize=Quantization(calibration=_calibration()))
    assert result.summary["mrvl_subgraphs"] >= 1
    assert result.manifest["quantization"]


def test_a_quantizer_conversion_failure_is_a_clear_error(tmp_path, monkeypatch):
    from onnx.version_converter import ConvertError

    def refuse(model, target):
        raise ConvertError("Input convolution_W is undefined!")
    monkeypatch.setattr(onnx.version_converter, "convert_version", refuse)
    if tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 19):
        # 1.18's quantize_static runs no version converter; it used to fail on the IR-3 model's
        # initializers listed as inputs ("Required inputs ... are missing"), which the recipe
        # now makes constants first (quantize/recipe.py): nothing fails, the model quantizes
        result = convert(super_resolution(), tmp_path / "a",
                         quantize=Quantization(calibration=_calibration()))
        assert result.manifest["quantization"]
        return
    with pytest.raises(UnsupportedModelError, match="quantize_static cannot quantize it") as caught:
        convert(super_resolution(), tmp_path / "a",
                quantize=Quantization(calibration=_calibration()))
    assert isinstance(caught.value, MrvlConvertError)


def _one_resize(op: str, opset: int, mode: str, scales) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    node = helper.make_node(op, ["x", "scales"], ["y"], mode=mode, name="up")
    graph = helper.make_graph([node], "old_resize", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 5, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run_x(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("op,opset,mode,scales", [
    ("Upsample", 9, "linear", [1, 1, 2, 3]), ("Upsample", 9, "linear", [1, 1, 2.5, 1.7]),
    ("Resize", 10, "linear", [1, 1, 0.6, 0.5]), ("Upsample", 9, "nearest", [1, 1, 2.5, 1.7]),
    ("Resize", 10, "nearest", [1, 1, 2, 3])])
def test_old_resizes_keep_their_coordinates(op, opset, mode, scales):
    """onnx's converter leaves opset 11's half_pixel default on a converted Upsample/Resize-10:
    a linear one moved its samples (1.39 off on this input); now asymmetric, bit-equal."""
    given = _one_resize(op, opset, mode, scales)
    upgrade = opset_upgrade.upgrade_opset(given, opset)
    assert upgrade.used == 11, upgrade.note
    x = np.random.default_rng(1).standard_normal((1, 3, 5, 6)).astype(np.float32)
    np.testing.assert_array_equal(_run_x(upgrade.model, x), _run_x(given, x))


def test_a_nearest_shrink_of_opset_10_is_kept_as_given():
    """onnxruntime's Resize-10 rounds a nearest shrink in a way no opset-11 mode writes."""
    upgrade = opset_upgrade.upgrade_opset(_one_resize("Resize", 10, "nearest", [1, 1, .6, .5]), 10)
    assert upgrade.used == 10 and "shrinks" in upgrade.note
