"""The int8 forms one by one: what each writes in the Nodes-JSON and Constants-JSON (the newer
codegen's attributes: princekumar70/tvm @9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc), that it computes onnxruntime's run of the QDQ model
as written, and report.json's ``int8_forms`` for the forms that are not exact by construction
(the fp16 Softmax between quant layers, with its measured distance)."""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize.recipe import quantize_int8


def _model(nodes, inits: Dict[str, np.ndarray], x_shape, opset: int = 14) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _conv(name: str, x: str, y: str, inits: Dict[str, np.ndarray], cin: int, cout: int,
          rng: np.random.Generator, k: int = 3) -> onnx.NodeProto:
    inits[f"{name}_w"] = rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5
    inits[f"{name}_b"] = rng.standard_normal(cout) * 0.1
    return helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y], name=name,
                            pads=[k // 2] * 4)


def _quantized(tmp_path: Path, model: onnx.ModelProto, shape, samples: int = 16,
               feeds: int = 30) -> Tuple[Path, List[Dict[str, np.ndarray]]]:
    onnx.save(model, tmp_path / "float.onnx")
    rng = np.random.default_rng(0)
    calibration = rng.uniform(-1, 1, (samples, *shape[1:])).astype(np.float32)
    qdq = quantize_int8(tmp_path / "float.onnx", tmp_path / "qdq.onnx", {"x": calibration})
    inputs = rng.uniform(-1, 1, (feeds, *shape[1:])).astype(np.float32)
    return qdq, [{"x": inputs[i:i + 1]} for i in range(feeds)]


def _reference(qdq: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    return ort.InferenceSession(str(qdq), options, providers=["CPUExecutionProvider"])


def _outputs(qdq: Path, result, feeds) -> Tuple[np.ndarray, np.ndarray]:
    hybrid, reference = mrvl_convert.HybridSession(result.out_dir), _reference(qdq)
    return (np.stack([hybrid.run(None, f)[0] for f in feeds]),
            np.stack([reference.run(None, f)[0] for f in feeds]))


def _layers(result) -> Tuple[List[Dict], Dict[str, Dict]]:
    [stage] = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    nodes = json.loads((result.out_dir / stage["nodes_json"]).read_text())["nodes"]
    consts = json.loads((result.out_dir / stage["consts_json"]).read_text())
    return [n for n in nodes if n["op"] == "tvm_op"], consts


def _int8_const(entry: Dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(entry["data_base64"]), np.int8).reshape(entry["shape"])


def _chain_table(s_in: float, op: onnx.NodeProto, s_out: float, inits) -> np.ndarray:
    """onnxruntime's DQ -> op -> Q on every int8 value, by the uint8 bit pattern (independent of
    lut.py: its own model)."""
    nodes = [helper.make_node("DequantizeLinear", ["q", "si", "z"], ["f"]),
             helper.make_node(op.op_type, ["f"] + list(op.input[1:]), ["g"],
                              **{a.name: helper.get_attribute_value(a) for a in op.attribute}),
             helper.make_node("QuantizeLinear", ["g", "so", "z"], ["out"])]
    tensors = [numpy_helper.from_array(np.float32(s_in), "si"),
               numpy_helper.from_array(np.float32(s_out), "so"),
               numpy_helper.from_array(np.int8(0), "z")]
    tensors += [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("q", TensorProto.INT8,
                                                                         [256])],
                              [helper.make_tensor_value_info("out", TensorProto.INT8, None)],
                              tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"q": np.arange(256, dtype=np.uint8).view(np.int8)})[0]


def _scale_after(qdq: Path, node: str) -> float:
    """The scale of the QuantizeLinear of node ``node``'s output."""
    model = onnx.load(qdq)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    output = next(n for n in model.graph.node if n.name == node).output[0]
    quantize = next(n for n in model.graph.node
                    if n.op_type == "QuantizeLinear" and n.input[0] == output)
    return float(inits[quantize.input[1]])


def _head(nodes: List[onnx.NodeProto], inits: Dict[str, np.ndarray], channels: int,
          rng: np.random.Generator) -> List[onnx.NodeProto]:
    """A 1x1 convolution of ``o`` to ``y``: quantize_static quantizes an op it does not know
    (HardSwish, Sub...) only where a quantized op reads its output."""
    return nodes + [_conv("head", "o", "y", inits, channels, 2, rng, k=1)]


@pytest.mark.parametrize("op, attrs", [("HardSwish", {}), ("HardSigmoid", {"alpha": 0.2}),
                                       ("LeakyRelu", {"alpha": 0.2})])
def test_lut_after_conv_is_the_models_own_op_by_uint8_pattern(tmp_path, op, attrs):
    """Conv -> op: one Conv2D with activation_type LUT and lut_const_name <layer>_const_2 (after
    kernel and bias, as the codegen numbers it), an int8 [1, 256] table whose entry u is
    onnxruntime's output for the int8 value with bit pattern u; the hybrid equals onnxruntime."""
    rng, inits = np.random.default_rng(1), {}
    nodes = _head([_conv("conv", "x", "c", inits, 3, 4, rng),
                   helper.make_node(op, ["c"], ["o"], name="act", **attrs)], inits, 4, rng)
    qdq, feeds = _quantized(tmp_path, _model(nodes, inits, [1, 3, 6, 6]), [1, 3, 6, 6])
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    layers, consts = _layers(result)
    conv = next(n for n in layers if "act" in n["attrs"]["source_nodes"])
    assert conv["attrs"]["activation_type"] == ["LUT"]
    assert conv["attrs"]["lut_const_name"] == [f"{conv['name']}_const_2"]
    entry = consts[conv["attrs"]["lut_const_name"][0]]
    assert entry["dtype"] == "int8" and entry["shape"] == [1, 256]
    want = _chain_table(_scale_after(qdq, "conv"), nodes[1], _scale_after(qdq, "act"), {})
    np.testing.assert_array_equal(_int8_const(entry).reshape(256), want)
    got, ref = _outputs(qdq, result, feeds)
    np.testing.assert_array_equal(got, ref)


def _after_pool(tmp_path: Path, op: str, extra: Dict[str, np.ndarray], **attrs):
    """Conv -> MaxPool -> op: the op follows a layer that fuses nothing (a standalone form)."""
    rng, inits = np.random.default_rng(2), dict(extra)
    nodes = [_conv("conv", "x", "c", inits, 3, 4, rng),
             helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node(op, ["p"] + list(extra), ["o"], name="op", **attrs)]
    nodes = _head(nodes, inits, 4, rng)
    qdq, feeds = _quantized(tmp_path, _model(nodes, inits, [1, 3, 6, 6]), [1, 3, 6, 6])
    return qdq, feeds, mrvl_convert.convert(qdq, tmp_path / "out")


def test_standalone_clip_is_a_clamp_in_the_integer_domain(tmp_path):
    """MaxPool -> Clip(-0.3, 0.5): a requant to the Clip's scale and a Clip on the int8 values
    with the quantized bounds as a_min / a_max (integers); exact."""
    extra = {"lo": np.array(-0.3), "hi": np.array(0.5)}
    qdq, feeds, result = _after_pool(tmp_path, "Clip", extra)
    assert result.placement("op")["rule"] == "mrvl.qnn_clip"
    layers, _ = _layers(result)
    clip = next(n["attrs"] for n in layers if n["attrs"]["layer_name"] == ["Clip"])
    s_out = _scale_after(qdq, "op")
    assert clip["dtype"] == ["int8"]
    assert float(clip["a_min"][0]) == max(-128.0, float(np.rint(np.float32(-0.3) / np.float32(s_out))))
    assert float(clip["a_max"][0]) == min(127.0, float(np.rint(np.float32(0.5) / np.float32(s_out))))
    got, ref = _outputs(qdq, result, feeds)
    np.testing.assert_array_equal(got, ref)


def test_standalone_hardswish_is_a_lut_on_an_identity_sum2d(tmp_path):
    """MaxPool -> HardSwish: a Sum2D adding an int8 zero at the input's scale (all three scales
    the input's) whose LUT is the HardSwish; exact."""
    qdq, feeds, result = _after_pool(tmp_path, "HardSwish", {})
    assert result.placement("op")["rule"] == "mrvl.qnn_lut"
    layers, consts = _layers(result)
    carrier = next(n["attrs"] for n in layers if n["attrs"]["layer_name"] == ["Sum2D"])
    assert carrier["activation_type"] == ["LUT"]
    scales = {carrier[k][0] for k in ("lhs_input_scale", "rhs_input_scale", "output_scale")}
    assert len(scales) == 1
    assert not _int8_const(consts[carrier["input_const_name"][0]]).any()
    got, ref = _outputs(qdq, result, feeds)
    np.testing.assert_array_equal(got, ref)


def test_sub_resize_and_reduce_mean_are_int8_layers(tmp_path):
    """Sub of two convolutions (an Add reads it: quantize_static quantizes a Resize's input only
    when its producer is quantized), a nearest Resize and a Mul by the channel mean: Sub with
    lhs/rhs/output scales, Resize2D and ReduceMean on int8 values (no quant layer between),
    the ReduceMean with input_scale / output_scale; the hybrid equals onnxruntime."""
    rng, inits = np.random.default_rng(3), {"scales": np.array([1, 1, 2, 2])}
    nodes = [_conv("a", "x", "ca", inits, 3, 4, rng), _conv("b", "x", "cb", inits, 3, 4, rng),
             helper.make_node("Sub", ["ca", "cb"], ["d"], name="sub"),
             helper.make_node("Add", ["d", "ca"], ["r"], name="add"),
             helper.make_node("Resize", ["r", "", "scales"], ["u"], name="resize",
                              mode="nearest"),
             helper.make_node("ReduceMean", ["u"], ["m"], name="mean", axes=[1], keepdims=1),
             helper.make_node("Mul", ["u", "m"], ["o"], name="mul")]
    nodes = _head(nodes, inits, 4, rng)
    qdq, feeds = _quantized(tmp_path, _model(nodes, inits, [1, 3, 4, 4]), [1, 3, 4, 4])
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    layers, _ = _layers(result)
    kinds = [n["attrs"]["layer_name"][0] for n in layers]
    assert kinds.count("quant") == 2, kinds   # the region's two edges only
    attrs = {n["attrs"]["layer_name"][0]: n["attrs"] for n in layers}
    assert {k for k in attrs["Sub"] if k.endswith("_scale")} == \
        {"lhs_input_scale", "rhs_input_scale", "output_scale"}
    assert {k for k in attrs["ReduceMean"] if k.endswith("_scale")} == \
        {"input_scale", "output_scale"}
    assert attrs["Resize2D"]["dtype"] == attrs["ReduceMean"]["dtype"] == ["int8"]
    got, ref = _outputs(qdq, result, feeds)
    np.testing.assert_array_equal(got, ref)


def test_softmax_is_an_fp16_layer_between_quant_layers_within_its_bound(tmp_path):
    """The set has no int8 Softmax: it stays in the stage as an fp16 layer between a
    dequantizing and a quantizing quant layer (as --keep-fp16 leaves a layer), report.json
    names it in int8_forms, and the hybrid stays within the stated bound of onnxruntime:
    (2^-10 L + 2^-11) p / output_scale steps before rounding, L the largest logit."""
    rng, inits = np.random.default_rng(4), {}
    inits["fc_w"] = rng.standard_normal((10, 12)) * 0.8
    inits["fc_b"] = np.zeros(10)
    nodes = [_conv("conv", "x", "c", inits, 3, 12, rng),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["z"], name="fc", transB=1),
             helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=1)]
    qdq, feeds = _quantized(tmp_path, _model(nodes, inits, [1, 3, 8, 8]), [1, 3, 8, 8],
                            feeds=200)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    [entry] = result.report["int8_forms"]
    assert entry["layer_name"] == "Softmax" and entry["source_nodes"] == ["softmax"]
    assert entry["form"].startswith("fp16 layer between quant layers")
    got, ref = _outputs(qdq, result, feeds)
    s_in, s_out = _scale_after(qdq, "fc"), _scale_after(qdq, "softmax")
    steps = np.rint(np.abs(got.astype(np.float64) - ref) / s_out)
    bound = (2.0 ** -10 * 127 * s_in + 2.0 ** -11) * ref.astype(np.float64) / s_out
    assert np.all(steps <= np.ceil(bound + 0.5)), (steps.max(), bound.max())
    assert steps.max() <= 1


def test_report_names_an_int8_layer_whose_bias_scale_the_json_cannot_state(tmp_path):
    """A Conv whose int32 bias is dequantized with another scale than input x weight scale
    (another quantizer's rounding): the Conv2D is named in int8_forms, exactness is not
    claimed for it."""
    rng, inits = np.random.default_rng(5), {}
    nodes = [_conv("conv", "x", "y", inits, 3, 4, rng)]
    qdq, _ = _quantized(tmp_path, _model(nodes, inits, [1, 3, 6, 6]), [1, 3, 6, 6])
    model = onnx.load(qdq)
    bias_dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear"
                   and n.output[0] == next(c for c in model.graph.node
                                           if c.op_type == "Conv").input[2])
    scale = next(t for t in model.graph.initializer if t.name == bias_dq.input[1])
    value = numpy_helper.to_array(scale) * np.float32(1 + 2e-6)
    scale.CopyFrom(numpy_helper.from_array(value.astype(np.float32), scale.name))
    onnx.save(model, qdq)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    [entry] = result.report["int8_forms"]
    assert entry["layer_name"] == "Conv2D" and "bias scale" in entry["form"]
