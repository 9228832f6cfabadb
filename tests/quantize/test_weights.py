"""Weights written as nodes (Paddle's Constants, an Identity or a Cast of a constant, a weight two
Convs share) are quantized as weights (quantize/weights.py): the step is bit-exact on
onnxruntime, and a Paddle-style model through ``convert(quantize=...)`` and
``mrvl-convert --quantize int8`` is one Mrvl subgraph whose every Conv is an int8 layer, within
the int8 corpus's steps of onnxruntime's run of the QDQ model kept in the artifact (issue 39)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize.recipe import Quantization
from mrvl_convert.quantize.weights import weights_as_initializers
from support.int8 import output_scale, run_both, steps

SHAPE = (1, 3, 16, 16)
CONVS = ("conv1", "conv2", "conv3", "conv4", "conv5")


class _Paddle:
    """A model as paddle2onnx writes one: every weight, bias and BN statistic a Constant node."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        tensor = numpy_helper.from_array(value, f"{name}_value")
        self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_const",
                                           value=tensor))
        return name

    def weight(self, name: str, shape, scale: float = 0.3) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def node(self, op: str, inputs: List[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def bn(self, x: str, channels: int, name: str) -> str:
        params = [self.const(f"{name}_{key}", value.astype(np.float32)) for key, value in (
            ("scale", 1 + 0.2 * self.rng.standard_normal(channels)),
            ("bias", 0.1 * self.rng.standard_normal(channels)),
            ("mean", 0.1 * self.rng.standard_normal(channels)),
            ("var", 0.5 + self.rng.random(channels)))]
        return self.node("BatchNormalization", [x, *params], name, epsilon=1e-5)

    def hard_swish(self, x: str, name: str) -> str:
        """Paddle's spelling: x * clip(x + 3, 0, 6) / 6, every number a Constant."""
        three = self.const(f"{name}_three", np.array(3.0, np.float32))
        low, high = (self.const(f"{name}_{k}", np.array(v, np.float32))
                     for k, v in (("low", 0.0), ("high", 6.0)))
        six = self.const(f"{name}_six", np.array(6.0, np.float32))
        shifted = self.node("Add", [x, three], f"{name}_add")
        clipped = self.node("Clip", [shifted, low, high], f"{name}_clip")
        return self.node("Div", [self.node("Mul", [x, clipped], f"{name}_mul"), six], name)


def paddle_style_model(seed: int = 0) -> onnx.ModelProto:
    """Conv+BN+Relu; a depthwise Conv whose weight is an Identity of a Constant, +BN+hard-swish
    (Paddle's spelling); a Conv whose weight is a float16 Constant Cast to float and whose bias
    is added as a Reshape of a Constant; two Convs sharing one weight; a MatMul whose weight is
    a Transpose and whose bias an Unsqueeze of a Constant."""
    p = _Paddle(seed)
    x = p.node("Conv", ["x", p.weight("w1", (8, 3, 3, 3))], "conv1", pads=[1] * 4,
               strides=[2, 2])
    x = p.node("Relu", [p.bn(x, 8, "bn1")], "relu1")
    wrapped = p.node("Identity", [p.weight("w2_raw", (8, 1, 3, 3))], "w2")
    x = p.node("Conv", [x, wrapped], "conv2", pads=[1] * 4, group=8)
    x = p.hard_swish(p.bn(x, 8, "bn2"), "hswish2")
    half = p.const("w3_half", (p.rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float16))
    cast = p.node("Cast", [half], "w3", to=onnx.TensorProto.FLOAT)
    # Paddle adds a bias as Add(Conv, Reshape(Constant, Constant))
    bias = p.node("Reshape", [p.weight("b3", (8,), 0.1),
                              p.const("b3_shape", np.array([1, -1, 1, 1], np.int64))], "b3_4d")
    x = p.node("Relu", [p.node("Add", [p.node("Conv", [x, cast], "conv3"), bias], "conv3_bias")],
               "relu3")
    shared = p.weight("w_shared", (8, 8, 3, 3), 0.2)
    x = p.node("Relu", [p.node("Conv", [x, shared, p.weight("b4", (8,), 0.1)], "conv4",
                               pads=[1] * 4)], "relu4")
    x = p.node("Relu", [p.node("Conv", [x, shared], "conv5", pads=[1] * 4)], "relu5")
    x = p.node("Flatten", [p.node("GlobalAveragePool", [x], "pool")], "flatten", axis=1)
    x = p.node("MatMul", [x, p.node("Transpose", [p.weight("w_fc_t", (4, 8))], "w_fc",
                                    perm=[1, 0])], "fc")
    bias = p.node("Unsqueeze", [p.weight("b_fc", (4,), 0.1),
                                p.const("b_fc_axes", np.array([0], np.int64))], "b_fc_2d")
    p.nodes.append(helper.make_node("Add", [x, bias], ["y"], name="fc_bias"))
    graph = helper.make_graph(
        p.nodes, "paddle_style",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto, feeds: List[Dict[str, np.ndarray]],
         level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
         ) -> List[np.ndarray]:
    """Every output of ``model`` on each feed; by default onnxruntime computing the nodes as
    written (its optimizer would fold the constants itself)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return [out for feed in feeds for out in session.run(None, feed)]


def _feeds(count: int, seed: int = 5) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(count)]


def test_weights_become_initializers_bit_for_bit():
    model = paddle_style_model()
    turned = weights_as_initializers(model)
    onnx.checker.check_model(turned)
    turned_ops = {"Constant", "Identity", "Cast", "Reshape", "Transpose", "Unsqueeze"}
    ops = [n.op_type for n in turned.graph.node]
    assert not turned_ops & set(ops), ops
    assert [n.name for n in turned.graph.node] == [
        n.name for n in model.graph.node if n.op_type not in turned_ops]
    inits = {t.name: t for t in turned.graph.initializer}
    assert {"w1", "w2", "w3", "b3_4d", "w_shared", "w_fc", "b_fc_2d", "bn1_var",
            "hswish2_six"} <= set(inits)
    # read only by what was turned
    assert not {"w2_raw", "w3_half", "b3", "w_fc_t", "b_fc_axes"} & set(inits)
    assert list(inits["b3_4d"].dims) == [1, 8, 1, 1] and list(inits["w_fc"].dims) == [8, 4]
    assert inits["w3"].data_type == onnx.TensorProto.FLOAT
    # each new initializer holds the bits onnxruntime computes for its tensor in the original
    made = [t for t in turned.graph.initializer if t.name not in
            {i.name for i in model.graph.initializer}]
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    del exposed.graph.output[:]
    exposed.graph.output.extend(helper.make_empty_tensor_value_info(t.name) for t in made)
    for tensor, value in zip(made, _run(exposed, _feeds(1))):
        assert numpy_helper.to_array(tensor).tobytes() == value.tobytes(), tensor.name
        assert numpy_helper.to_array(tensor).dtype == value.dtype, tensor.name
    # the outputs, bit for bit, with onnxruntime's optimizer (its kernels take a constant
    # operand as an initializer either way: a MatMul prepacks it and sums in its own order)
    feeds = _feeds(8)
    for want, got in zip(_run(model, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
                         _run(turned, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
        assert want.tobytes() == got.tobytes()


def _tiny(nodes, inits=(), inputs=(), outputs=("y",), ir_version: int = 8) -> onnx.ModelProto:
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [value("x", onnx.TensorProto.FLOAT, [2]),
                     *(value(i, onnx.TensorProto.FLOAT, [2]) for i in inputs)],
        [value(o, onnx.TensorProto.FLOAT, [2]) for o in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=ir_version)


def test_what_is_not_a_constant_weight_stays():
    """An initializer also fed as a graph input can change at run time; a Cast to an integer
    rounds as numpy may not; a Constant that is a graph output stays a node; IR < 4 models
    (initializers are inputs there) are left alone."""
    fed = numpy_helper.from_array(np.ones(2, np.float32), "fed")
    to_int = helper.make_node("Cast", ["c"], ["ci"], name="to_int", to=onnx.TensorProto.INT32)
    nodes = [helper.make_node("Identity", ["fed"], ["w"], name="id"),
             helper.make_node("Constant", [], ["c"], name="c", value_floats=[1.5, -2.5]),
             to_int,
             helper.make_node("Cast", ["ci"], ["cf"], name="back", to=onnx.TensorProto.FLOAT),
             helper.make_node("Constant", [], ["out"], name="out", value_floats=[1.0, 2.0]),
             helper.make_node("Mul", ["x", "w"], ["xw"], name="mul"),
             helper.make_node("Add", ["xw", "cf"], ["y"], name="add")]
    model = _tiny(nodes, [fed], inputs=["fed"], outputs=["y", "out"])
    turned = weights_as_initializers(model)
    assert [n.name for n in turned.graph.node] == ["id", "to_int", "back", "out", "mul", "add"]
    assert {t.name for t in turned.graph.initializer} == {"fed", "c"}
    feeds = [{"x": np.array([3.0, -1.0], np.float32), "fed": np.array([2.0, 5.0], np.float32)}]
    for want, got in zip(_run(model, feeds), _run(turned, feeds)):
        assert want.tobytes() == got.tobytes()
    old = _tiny(nodes[1:2] + [helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                ir_version=3)
    assert weights_as_initializers(old) is old


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Reshape", [[1.0, 2.0], [3]], {}),              # 2 values into 3
    ("Squeeze", [[1.0, 2.0], [0]], {}),              # axis 0 has 2 elements
    ("Unsqueeze", [[1.0, 2.0], [5]], {}),            # no axis 5 in rank 2
    ("Transpose", [[1.0, 2.0]], {"perm": [1, 0]}),  # rank 1
])
def test_a_malformed_move_of_a_constant_stays_a_node(op, inputs, attrs):
    inits = [numpy_helper.from_array(np.array(v, np.float32 if k == 0 else np.int64), f"i{k}")
             for k, v in enumerate(inputs)]
    model = _tiny([helper.make_node(op, [i.name for i in inits], ["m"], name="move", **attrs),
                   helper.make_node("Add", ["x", "m"], ["y"], name="add")], inits)
    assert weights_as_initializers(model) is model


def _int8_layers(out_dir: Path) -> List[dict]:
    layers = []
    for path in sorted(out_dir.glob("*-nodes.json")):
        layers += [n for n in json.loads(path.read_text())["nodes"] if n["op"] == "tvm_op"]
    return layers


def _assert_all_int8(result, out_dir: Path, qdq: Path) -> None:
    """One Mrvl stage and nothing on the CPU; every Conv an int8 Conv2D layer (int8 kernel,
    int32 bias, one input, weight and output scale); the shared weight's scale its own; the
    hybrid within the int8 corpus's steps of onnxruntime's run of the QDQ model."""
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    placed = {n["name"]: n["placement"] for n in result.report["nodes"]}
    assert all(placed[name] == "mrvl" for name in (*CONVS, "fc")), placed
    convs = [n for n in _int8_layers(out_dir) if n["attrs"]["layer_name"] == ["Conv2D"]]
    owners = {name: n for n in convs for name in n["attrs"]["source_nodes"] if name in CONVS}
    assert sorted(owners) == sorted(CONVS)
    for node in convs:
        attrs = node["attrs"]
        assert attrs["dtype"] == ["int8"] and attrs["kernel_const"]["dtype"] == "int8"
        assert attrs.get("bias_const", {}).get("dtype", "int32") == "int32"
        assert all(len(attrs[k]) == 1 and float(attrs[k][0]) > 0
                   for k in ("input_scale", "weight_scale", "output_scale")), attrs
    # the shared weight quantized as a weight (max |w| / 127), once, for both readers
    shared = numpy_helper.to_array(next(n for n in paddle_style_model().graph.node
                                        if n.output[0] == "w_shared").attribute[0].t)
    for conv in ("conv4", "conv5"):
        scale = float(owners[conv]["attrs"]["weight_scale"][0])
        assert scale == pytest.approx(np.abs(shared).max() / 127, rel=1e-6)
    fc = [n for n in _int8_layers(out_dir) if n["attrs"]["layer_name"] == ["FC"]]
    assert len(fc) == 1 and fc[0]["attrs"]["kernel_const"]["dtype"] == "int8"
    got, want = run_both(qdq, out_dir, _feeds(20, seed=11))
    diff = steps(got, want, output_scale(onnx.load(qdq)))
    assert np.mean(diff <= 1) >= 0.999 and diff.max() <= 2, np.bincount(diff.astype(int).ravel())


@pytest.fixture()
def paddle_files(tmp_path: Path):
    model = tmp_path / "paddle_style.onnx"
    onnx.save(paddle_style_model(), model)
    data = tmp_path / "cal.npz"
    rng = np.random.default_rng(1)
    np.savez(data, x=rng.standard_normal((16, *SHAPE[1:])).astype(np.float32))
    return model, data


def test_paddle_style_model_in_int8_is_one_mrvl_subgraph(tmp_path, paddle_files):
    model, data = paddle_files
    out = tmp_path / "out"
    result = mrvl_convert.convert(model, out, quantize=Quantization(str(data)))
    qdq = out / result.manifest["quantization"]["file"]
    _assert_all_int8(result, out, qdq)
    ops = [n.op_type for n in onnx.load(qdq).graph.node]
    assert "Constant" not in ops and "BatchNormalization" not in ops


def test_paddle_style_model_through_the_cli(tmp_path, paddle_files, capsys):
    from mrvl_convert.cli.convert import main

    model, data = paddle_files
    out = tmp_path / "out"
    code = main([str(model), "-o", str(out), "--quantize", "int8", "--calibration", str(data),
                 "--quiet", "--jobs", "1"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())["models"][0]
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0)
    assert summary["mrvl_mac_share"] == 1.0
    artifact = out / "paddle_style"
    manifest = json.loads((artifact / "manifest.json").read_text())
    layers = _int8_layers(artifact)
    convs = [n for n in layers if n["attrs"]["layer_name"] == ["Conv2D"]]
    assert len(convs) == len(CONVS) and all(n["attrs"]["dtype"] == ["int8"] for n in convs)
    got, want = run_both(artifact / manifest["quantization"]["file"], artifact, _feeds(4))
    assert np.all(steps(got, want, output_scale(onnx.load(
        artifact / manifest["quantization"]["file"]))) <= 2)


@pytest.mark.parametrize("opset, op, extra, attrs", [
    (11, "Unsqueeze", [], {"axes": [0, -1]}),
    (11, "Squeeze", [], {"axes": [1]}),
    (13, "Squeeze", [], {}),
    (13, "Unsqueeze", [[-1]], {}),
    (13, "Reshape", [[0, -1]], {}),
    (14, "Reshape", [[2, 0, 3]], {"allowzero": 1}),
])
def test_moves_of_constants_hold_what_onnxruntime_computes(opset, op, extra, attrs):
    """Squeeze's and Unsqueeze's axes as attributes before opset 13 and inputs from it on,
    Reshape's 0 (copy the dim; with allowzero, a zero dim)."""
    data = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    if op == "Reshape" and attrs.get("allowzero"):
        data = np.zeros((2, 0, 3), np.float32)
    inits = [numpy_helper.from_array(data, "d")] + [
        numpy_helper.from_array(np.array(v, np.int64), f"e{k}") for k, v in enumerate(extra)]
    node = helper.make_node(op, [i.name for i in inits], ["m"], name="move", **attrs)
    graph = helper.make_graph([node], "g", [], [helper.make_empty_tensor_value_info("m")],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    assert weights_as_initializers(model) is model  # the graph's output: it stays a node
    consumer = onnx.ModelProto()
    consumer.CopyFrom(model)
    consumer.graph.node.append(helper.make_node("Identity", ["m"], ["out"], name="read"))
    del consumer.graph.output[:]
    consumer.graph.output.append(helper.make_empty_tensor_value_info("out"))
    turned = weights_as_initializers(consumer)
    assert [n.name for n in turned.graph.node] == ["read"]
    made = {t.name: numpy_helper.to_array(t) for t in turned.graph.initializer}
    want = _run(consumer, [{}])[0]
    assert made["m"].shape == want.shape and made["m"].tobytes() == want.tobytes()
