"""The int8 Mul2D, QnnSigmoid, QnnTanh, Concat and requant layers: random QDQ models from
Marvell's quantize_static recipe, converted, against onnxruntime running the same QDQ model.

Attribute names are the newer codegen's (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc):
``CreateCompositeMrvlQnnMulLayer`` (Mul2D), ``CreateCompositeMrvlActivationLayer`` (QnnSigmoid,
QnnTanh), ``CreateMrvlConcatLayer`` (Concat, no scale), ``CreateMrvlQuantLayer`` with
``SetMrvlQuantAttrs`` of a ``qnn.requantize`` (requant).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.layers import CATALOGUE
from support.int8 import (output_scale, placements, quantized, reference_session, run_both,
                          steps)


def _model(nodes, inits: Dict[str, np.ndarray], x_shape, out_shape) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def _convs(rng: np.random.Generator) -> Dict[str, np.ndarray]:
    return {"w": rng.standard_normal((4, 3, 3, 3)) * 0.4, "b": rng.standard_normal(4) * 0.1,
            "w2": rng.standard_normal((4, 4, 1, 1)) * 0.5, "b2": rng.standard_normal(4) * 0.1}


def _case(name: str) -> onnx.ModelProto:
    """Two convolutions c and d (different output scales) of x [1, 3, 6, 6], the op ("op",
    output o), and a 1x1 convolution of o (quantize_static quantizes an op's output only where
    a quantized op reads it)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    inits = _convs(rng)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c", "w2", "b2"], ["d"], name="conv2")]
    if name == "mul":
        nodes.append(helper.make_node("Mul", ["c", "d"], ["o"], name="op"))
    elif name == "mul_relu":
        nodes += [helper.make_node("Mul", ["c", "d"], ["m"], name="op"),
                  helper.make_node("Relu", ["m"], ["o"], name="relu")]
    elif name == "mul_gate":
        nodes += [helper.make_node("GlobalAveragePool", ["d"], ["g"], name="gap"),
                  helper.make_node("Sigmoid", ["g"], ["s"], name="gate"),
                  helper.make_node("Mul", ["c", "s"], ["o"], name="op")]
    elif name == "mul_const":
        inits["k"] = rng.standard_normal((1, 4, 1, 1))
        nodes.append(helper.make_node("Mul", ["d", "k"], ["o"], name="op"))
    elif name in ("sigmoid", "tanh"):
        nodes.append(helper.make_node(name.capitalize(), ["d"], ["o"], name="op"))
    elif name == "concat":
        nodes.append(helper.make_node("Concat", ["c", "d"], ["o"], name="op", axis=1))
    elif name == "min_relu6":
        inits["six"] = np.array(6.0)
        nodes += [helper.make_node("Relu", ["d"], ["r"], name="relu"),
                  helper.make_node("Min", ["r", "six"], ["o"], name="op")]
    channels = 8 if name == "concat" else 4
    inits["w3"] = rng.standard_normal((4, channels, 1, 1)) * 0.5
    nodes.append(helper.make_node("Conv", ["o", "w3"], ["y"], name="conv3"))
    return _model(nodes, inits, [1, 3, 6, 6], [1, 4, 6, 6])


#: case -> (the op's rule, the layer it becomes, the most int8 steps from onnxruntime)
CASES = {
    "mul": ("mrvl.qnn_mul", "Mul2D", 0),
    "mul_relu": ("mrvl.qnn_mul", "Mul2D", 0),
    "mul_gate": ("mrvl.qnn_mul", "Mul2D", 1),   # the gate's sigmoid: a step at near-ties
    "mul_const": ("mrvl.qnn_mul", "Mul2D", 0),
    "sigmoid": ("mrvl.qnn_sigmoid", "QnnSigmoid", 1),
    "tanh": ("mrvl.qnn_tanh", "QnnTanh", 1),
    "concat": ("mrvl.qnn_concat", "Concat", 0),
    "min_relu6": ("mrvl.qnn_requantize", "requant", 0),
}


def _layers(result) -> List[Dict]:
    stages = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    assert len(stages) == 1, result.manifest["stages"]
    nodes = json.loads((result.out_dir / stages[0]["nodes_json"]).read_text())["nodes"]
    return [n["attrs"] for n in nodes if n["op"] == "tvm_op"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_int8_kind_equals_onnxruntime(tmp_path, case):
    """The whole QDQ model is one int8 Mrvl stage, and its output is onnxruntime's: element for
    element, or within the one step a float transcendental can move (module docstrings)."""
    rule, layer, most = CASES[case]
    qdq, feeds = quantized(tmp_path, _case(case), [1, 3, 6, 6], samples=40)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    places = placements(result)
    assert {p["placement"] for p in places.values()} == {"mrvl"}, \
        {k: p.get("reason") for k, p in places.items() if p["placement"] != "mrvl"}
    assert places["op"]["rule"] == rule
    assert layer in [a["layer_name"][0] for a in _layers(result)]
    last = "relu" if case == "mul_relu" else "op"
    got, want = _op_output_both(qdq, result.out_dir, feeds, last)
    diff = np.abs(got - want)
    assert diff.max() <= most, np.bincount(diff.astype(int).ravel())


def _op_output_both(qdq: Path, artifact: Path, feeds, last: str
                    ) -> "tuple[np.ndarray, np.ndarray]":
    """The int8 output of node ``last`` (its QuantizeLinear's): the Mrvl layer that computes it
    (NHWC, made NCHW) and onnxruntime's, the model run op by op with that tensor as an output."""
    model = onnx.load(qdq)
    node = next(n for n in model.graph.node if n.name == last)
    after = next(n for n in model.graph.node if node.output[0] in n.input)
    model.graph.output.append(helper.make_tensor_value_info(after.output[0],
                                                            onnx.TensorProto.INT8, None))
    onnx.save(model, artifact / "reference.onnx")
    reference = reference_session(artifact / "reference.onnx")
    hybrid = mrvl_convert.HybridSession(artifact)
    got, want = [], []
    for feed in feeds:
        _, layers = hybrid.run_layers(feed)
        layer = [t for t in layers if last in t.spec.source_nodes][-1]
        got.append(layer.value.transpose(0, 3, 1, 2))
        want.append(reference.run([after.output[0]], feed)[0])
    return np.stack(got).astype(np.float64), np.stack(want).astype(np.float64)


def test_int8_concat_requantizes_the_input_of_another_scale(tmp_path):
    """Golden (CreateMrvlConcatLayer writes no scale): the Concat carries only ``axis``; each
    input whose scale is not the output's gets a requant layer (input_scale, output_scale, the
    layouts) in front of it."""
    qdq, _ = quantized(tmp_path, _case("concat"), [1, 3, 6, 6])
    layers = _layers(mrvl_convert.convert(qdq, tmp_path / "out"))
    concat = next(a for a in layers if a["layer_name"] == ["Concat"])
    # The Concat's output scale: the one its consumer, conv3, dequantizes its input with.
    concat_q = next(a for a in layers if a["layer_name"] == ["Conv2D"]
                    and "conv3" in a["source_nodes"])
    concat_q = {"output_scale": concat_q["input_scale"]}
    assert not [k for k in concat if k.endswith("_scale")] and concat["axis"] == ["3"]
    requants = [a for a in layers if a["layer_name"] == ["requant"]]
    assert requants, [a["layer_name"] for a in layers]
    for attrs in requants:
        assert {k for k in attrs if k.endswith("_scale")} == {"input_scale", "output_scale"}
        assert attrs["src_layout"] == attrs["dst_layout"] == ["NHWC"]
        assert attrs["dtype"] == ["int8"]
        assert attrs["input_scale"] != attrs["output_scale"]
        assert attrs["output_scale"] == concat_q["output_scale"]


def test_int8_mul_and_activations_carry_the_codegen_attributes(tmp_path):
    """Golden: Mul2D's lhs_input_scale / rhs_input_scale / output_scale
    (CreateCompositeMrvlQnnMulLayer), QnnSigmoid's input_scale / output_scale
    (CreateCompositeMrvlActivationLayer), each the model's own float32 scale."""
    qdq, _ = quantized(tmp_path, _case("mul_gate"), [1, 3, 6, 6])
    layers = _layers(mrvl_convert.convert(qdq, tmp_path / "out"))
    scales = {float(np.float32(numpy_helper.to_array(i).reshape(-1)[0]))
              for i in onnx.load(qdq).graph.initializer if i.name.endswith("scale")}
    mul = next(a for a in layers if a["layer_name"] == ["Mul2D"])
    sigmoid = next(a for a in layers if a["layer_name"] == ["QnnSigmoid"])
    assert {k for k in mul if k.endswith("_scale")} == {"lhs_input_scale", "rhs_input_scale",
                                                        "output_scale"}
    assert {k for k in sigmoid if k.endswith("_scale")} == {"input_scale", "output_scale"}
    for attrs in (mul, sigmoid):
        assert attrs["dtype"] == ["int8"]
        assert all(float(attrs[k][0]) in scales for k in attrs if k.endswith("_scale"))
    assert sigmoid["data_layout"] == sigmoid["out_layout"] == ["NHWC"]


def test_catalogue_declares_the_new_int8_kinds():
    def scales(kind):
        return {a.name for a in CATALOGUE[kind].attrs if a.name.endswith("_scale")}

    assert scales("Mul2D") == {"lhs_input_scale", "rhs_input_scale", "output_scale"}
    assert scales("QnnSigmoid") == scales("QnnTanh") == scales("requant") == \
        {"input_scale", "output_scale"}
    assert not scales("Concat")
    for kind in ("QnnSigmoid", "QnnTanh", "requant"):
        assert CATALOGUE[kind].layer_sets == frozenset({"marvell"})


def _relabel_scale(qdq: Path, op_type: str, factor: float) -> None:
    """Give the QuantizeLinear / DequantizeLinear pair after the ``op_type`` node a scale of its
    own (for a Relu: what onnxruntime 1.18's quantize_static writes)."""
    model = onnx.load(qdq)
    relu = next(n for n in model.graph.node if n.op_type == op_type)
    quantize = next(n for n in model.graph.node if relu.output[0] in n.input)
    old = quantize.input[1]
    inits = {i.name: i for i in model.graph.initializer}
    value = numpy_helper.to_array(inits[old]) * np.float32(factor)
    model.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), "relu_s"))
    after = next(n for n in model.graph.node if quantize.output[0] in n.input)
    quantize.input[1] = after.input[1] = "relu_s"
    onnx.save(model, qdq)


def test_int8_relu_with_its_own_scale_is_a_fused_relu_and_a_requant(tmp_path):
    """Conv -> Q(s1) -> DQ -> Relu -> Q(s2): Conv2D with relu at s1, then requant s1 -> s2;
    exact, as quantize(max(x, 0)) = max(quantize(x), 0)."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    model = _model(nodes, _convs(rng), [1, 3, 6, 6], [1, 4, 6, 6])
    qdq, feeds = quantized(tmp_path, model, [1, 3, 6, 6], samples=40)
    _relabel_scale(qdq, "Relu", 0.37)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert placements(result)["relu"]["rule"] == "mrvl.qnn_conv2d"
    layers = _layers(result)
    names = [a["layer_name"][0] for a in layers]
    assert names == ["quant", "layout_transform", "Conv2D", "requant", "quant",
                     "layout_transform"], names
    conv, requant = layers[2], layers[3]
    assert conv["activation_type"] == ["relu"]
    assert requant["input_scale"] == conv["output_scale"]
    got, want = run_both(qdq, result.out_dir, feeds)
    assert steps(got, want, output_scale(onnx.load(qdq))).max() == 0


@pytest.mark.parametrize("factor, fused", [(None, True), (4.0, False)])
def test_int8_clip_fuses_where_it_is_a_relu_at_the_output_scale(tmp_path, factor, fused):
    """Clip(0, 0.05) quantized to 0.05/127 is max(q, 0): fused into the Conv2D as relu. With
    its scale four times larger the bound quantizes to 32, a clamp relu is not: fused as a LUT
    (layers/qnn/lut.py), and the hybrid still computes what onnxruntime does."""
    rng = np.random.default_rng(6)
    inits = dict(_convs(rng), lo=np.array(0.0), hi=np.array(0.05))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="clip")]
    qdq, feeds = quantized(tmp_path, _model(nodes, inits, [1, 3, 6, 6], [1, 4, 6, 6]),
                           [1, 3, 6, 6], samples=20)
    if factor is not None:
        _relabel_scale(qdq, "Clip", factor)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    place = placements(result)["clip"]
    assert place["rule"] == "mrvl.qnn_conv2d", place
    conv = next(a for a in _layers(result) if a["layer_name"] == ["Conv2D"])
    assert conv["activation_type"] == (["relu"] if fused else ["LUT"])
    got, want = run_both(qdq, result.out_dir, feeds)
    assert steps(got, want, output_scale(onnx.load(qdq))).max() == 0
