"""Data movement on int8 tensors carries its scale: Transpose, Reshape, Concat, Split, Slice and
Resize between int8 layers, quantized with Marvell's recipe (onnxruntime's quantize_static
writes a QuantizeLinear -> DequantizeLinear pair of the input's scale around each), are int8
layers of their own (``mrvl.qnn_*``) moving the int8 values as they are: one Mrvl subgraph, no
fp16 layer between quant layers (the only quant layers are the model's input and output edges),
bit-equal to onnxruntime's run of the QDQ model as written. A ShuffleNet v2 unit (channel
split, Concat, channel shuffle) is all of these at once.
"""
from __future__ import annotations

import json
from typing import Callable, Dict, List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from support.int8 import placements, quantized, run_both

SHAPE = [1, 3, 8, 8]


class _Net:
    """A float model built node by node: seeded convolutions, named nodes."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(5)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []

    def const(self, value: np.ndarray, dtype=np.float32) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, inputs: List[str], outputs: int = 1, **attrs) -> List[str]:
        name = f"{op_type.lower()}{len(self.nodes)}"
        names = [name] if outputs == 1 else [f"{name}_{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=name, **attrs))
        return names

    def conv(self, x: str, cin: int, cout: int, k: int = 3) -> str:
        w = self.rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5
        conv = self.op("Conv", [x, self.const(w), self.const(self.rng.standard_normal(cout) * 0.1)],
                       kernel_shape=[k, k], pads=[k // 2] * 4)[0]
        return self.op("Relu", [conv])[0]

    def model(self, y: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "movement",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
                                  self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=8)
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _transpose(net: _Net, x: str) -> str:
    y = net.op("Transpose", [x], perm=[0, 1, 3, 2])[0]
    return net.conv(y, 8, 4)


def _reshape(net: _Net, x: str) -> str:
    y = net.op("Reshape", [x, net.const([1, 16, 4, 8], np.int64)])[0]
    y = net.op("Reshape", [net.conv(y, 16, 8), net.const([1, 4, 8, 8], np.int64)])[0]
    return net.conv(y, 4, 4)


def _concat(net: _Net, x: str) -> str:
    y = net.op("Concat", [x, net.conv("x", 3, 4)], axis=1)[0]
    return net.conv(y, 12, 4)


def _split(net: _Net, x: str) -> str:
    a, b = net.op("Split", [x], outputs=2, axis=1)
    return net.op("Add", [net.conv(a, 4, 4), net.conv(b, 4, 4)])[0]


def _slice(net: _Net, x: str) -> str:
    starts, ends = net.const([1, 1, 0], np.int64), net.const([6, 7, 8], np.int64)
    y = net.op("Slice", [x, starts, ends, net.const([1, 2, 3], np.int64),
                         net.const([1, 2, 1], np.int64)])[0]
    return net.conv(y, 5, 4)


def _resize(net: _Net, x: str) -> str:
    y = net.op("Resize", [x, "", net.const([1, 1, 2, 2])], mode="nearest")[0]
    return net.conv(y, 8, 4)


# form -> (the model's middle, the op and the int8 rule that must take it)
FORMS: Dict[str, tuple] = {
    "transpose": (_transpose, "Transpose", "mrvl.qnn_transpose"),
    "reshape": (_reshape, "Reshape", "mrvl.qnn_reshape"),
    "concat": (_concat, "Concat", "mrvl.qnn_concat"),
    "split": (_split, "Split", "mrvl.qnn_split"),
    "slice": (_slice, "Slice", "mrvl.qnn_strided_slice"),
    "resize": (_resize, "Resize", "mrvl.qnn_resize2d"),
}


def _model(middle: Callable[[_Net, str], str]) -> onnx.ModelProto:
    net = _Net()
    return net.model(net.conv(middle(net, net.conv("x", 3, 8)), 4, 2, k=1))


def _layers(result) -> List[dict]:
    nodes = json.loads(next(result.out_dir.glob("*-nodes.json")).read_text())["nodes"]
    return [n["attrs"] for n in nodes if "layer_name" in n.get("attrs", {})]


def _cpu(result) -> Dict[str, str]:
    return {n["name"]: n.get("reason") for n in result.report["nodes"]
            if n["placement"] == "cpu"}


def _quantized_around(path, op_type: str) -> bool:
    """Whether the quantizer wrote the op as an int8 data move: between a DequantizeLinear and
    a QuantizeLinear of one scale (its operator registry decides: onnxruntime 1.18's has no
    Slice, so it calibrates the Slice's output as a value of its own; later ones do)."""
    qdq = onnx.load(str(path))
    consts = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    makers = {o: n for n in qdq.graph.node for o in n.output}
    readers = {i: n for n in qdq.graph.node for i in n.input}

    def same_scale(node) -> bool:
        dq, q = makers.get(node.input[0]), readers.get(node.output[0])
        return (dq is not None and dq.op_type == "DequantizeLinear" and q is not None
                and q.op_type == "QuantizeLinear"
                and np.array_equal(consts.get(dq.input[1]), consts.get(q.input[1])))

    nodes = [n for n in qdq.graph.node if n.op_type == op_type]
    return bool(nodes) and all(same_scale(n) for n in nodes)


def _assert_int8_throughout(result) -> None:
    """One Mrvl stage whose only quant layers are the input's and the output's edge: every
    layer between them computes on int8 values (none is an fp16 layer between quant layers)."""
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], _cpu(result)
    layers = _layers(result)
    quant = [a for a in layers if a["layer_name"] == ["quant"]]
    assert len(quant) == 2, [a["layer_name"][0] for a in layers]
    assert "int8_forms" not in result.report, result.report["int8_forms"]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_moves_int8_values_in_one_subgraph_bit_equal(tmp_path, form):
    middle, op_type, rule = FORMS[form]
    model = _model(middle)
    fp16 = mrvl_convert.convert(model, tmp_path / "fp16")
    assert [s["kind"] for s in fp16.manifest["stages"]] == ["mrvl"]
    qdq, feeds = quantized(tmp_path, model, SHAPE, samples=6)
    result = mrvl_convert.convert(qdq, tmp_path / "int8")
    moved = [n for n in placements(result).values() if n["op_type"] == op_type]
    if _quantized_around(qdq, op_type):
        _assert_int8_throughout(result)
        assert moved and {n["rule"] for n in moved} == {rule}, moved
    else:  # onnxruntime 1.18's quantize_static gives a Slice's output a scale of its own
        assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], _cpu(result)
        assert moved and all(n["placement"] == "mrvl" for n in moved), moved
    got, want = run_both(qdq, result.out_dir, feeds)
    assert np.array_equal(got, want)


def _shufflenet_v2(units: int = 3) -> onnx.ModelProto:
    """ShuffleNet v2 units (torchvision's stride-1 unit): split the channels in two, one half
    through 1x1 -> depthwise 3x3 -> 1x1, Concat with the other half, channel shuffle
    (Reshape [1, 2, C/2, H, W], Transpose the groups, Reshape back)."""
    net, c = _Net(), 16
    y = net.conv("x", 3, c)
    for _ in range(units):
        a, b = net.op("Split", [y], outputs=2, axis=1)
        h = net.conv(b, c // 2, c // 2, k=1)
        w = net.rng.standard_normal((c // 2, 1, 3, 3)) * 0.5
        h = net.op("Conv", [h, net.const(w), net.const(np.zeros(c // 2))], kernel_shape=[3, 3],
                   pads=[1, 1, 1, 1], group=c // 2)[0]
        h = net.conv(h, c // 2, c // 2, k=1)
        y = net.op("Concat", [a, h], axis=1)[0]
        y = net.op("Reshape", [y, net.const([1, 2, c // 2, 8, 8], np.int64)])[0]
        y = net.op("Transpose", [y], perm=[0, 2, 1, 3, 4])[0]
        y = net.op("Reshape", [y, net.const([1, c, 8, 8], np.int64)])[0]
    return net.model(net.op("GlobalAveragePool", [y])[0])


def test_a_shufflenet_v2_unit_is_one_int8_subgraph_bit_equal(tmp_path):
    model = _shufflenet_v2()
    fp16 = mrvl_convert.convert(model, tmp_path / "fp16")
    assert [s["kind"] for s in fp16.manifest["stages"]] == ["mrvl"]
    qdq, feeds = quantized(tmp_path, model, SHAPE, samples=6)
    result = mrvl_convert.convert(qdq, tmp_path / "int8")
    _assert_int8_throughout(result)
    rules = {n["op_type"]: n["rule"] for n in placements(result).values()
             if n["op_type"] in ("Split", "Concat", "Transpose")}
    assert rules == {"Split": "mrvl.qnn_split", "Concat": "mrvl.qnn_concat",
                     "Transpose": "mrvl.qnn_channel_shuffle"}, rules
    got, want = run_both(qdq, result.out_dir, feeds)
    assert np.array_equal(got, want)


def test_a_split_output_read_as_float_keeps_the_split_off_the_int8_form(tmp_path):
    """One output of the Split feeds a graph output directly (read as float, no QuantizeLinear
    after it): the int8 Split would hand int8 values to a float reader, so the rule refuses it
    with its reason and the model still computes what onnxruntime does."""
    qdq, feeds = quantized(tmp_path, _model(_split), SHAPE, samples=3)
    model = onnx.load(qdq)
    split = next(n for n in model.graph.node if n.op_type == "Split")
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] == split.output[1])
    dq = next(n for n in model.graph.node if n.input and n.input[0] == q.output[0])
    for node in model.graph.node:
        node.input[:] = [split.output[1] if i == dq.output[0] else i for i in node.input]
    model.graph.node.remove(q)
    model.graph.node.remove(dq)
    path = tmp_path / "float_reader.onnx"
    onnx.save(model, path)
    result = mrvl_convert.convert(path, tmp_path / "out")
    node = placements(result)[split.name]
    assert node.get("rule") != "mrvl.qnn_split"
    got, want = run_both(path, result.out_dir, feeds)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("piece", [0, 1])
def test_a_split_piece_quantized_on_another_stage_is_read_as_float(tmp_path, piece):
    """The QuantizeLinear after one piece denied (CPU): that stage reads the Split's output as
    the float it is in ONNX, so the Split is lowered as the exact fp16 form (dequantized, split,
    quantized); the model still computes what onnxruntime does, bit for bit."""
    qdq, feeds = quantized(tmp_path, _model(_split), SHAPE, samples=3)
    model = onnx.load(qdq)
    split = next(n for n in model.graph.node if n.op_type == "Split")
    first = mrvl_convert.convert(qdq, tmp_path / "whole")
    [q] = [n["name"] for n in first.report["nodes"] if n["op_type"] == "QuantizeLinear"
           and n["name"].startswith(split.output[piece])]
    result = mrvl_convert.convert(qdq, tmp_path / "out", deny=[q])
    assert placements(result)[q]["placement"] == "cpu"
    split_layers = [a for a in _layers(result) if a["layer_name"] == ["Split"]]
    assert len(split_layers) == 1 and split_layers[0]["dtype"] == ["float32"]
    got, want = run_both(qdq, result.out_dir, feeds)
    assert np.array_equal(got, want)
