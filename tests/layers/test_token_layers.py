"""Layers on token tensors ([B, T, C], [B, heads, T, d]): what each writes, and that the hybrid run
computes what onnxruntime does (``mrvl_convert.compare`` on every model).

The mapping (``ir/layout.py``): a token tensor keeps its logical order; [B, T, C] is the codegen's
NHWC [B, T, C, 1] (princekumar70/tvm@9446d803 codegen.cc ``CreateCompositeMrvlFcLayer``,
``resizeInputOutputLayoutTo4dim``), and the last axis of [B, heads, T, d] is NHWC's C as it lies.
"""
from __future__ import annotations

import json
from typing import Dict, List, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from support.device_profiles import profile_of_batch


class _Net:
    def __init__(self, *inputs: Sequence) -> None:
        self.rng = np.random.default_rng(0)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))
                       for name, shape in inputs]

    def const(self, value) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int) -> str:
        return self.const((self.rng.standard_normal(shape) * shape[0] ** -0.5)
                          .astype(np.float32))

    def op(self, op_type: str, inputs: Sequence[str], name: str = "", **attrs) -> str:
        name = name or f"{op_type}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [f"{name}_out"], name=name,
                                           **attrs))
        return f"{name}_out"

    def fc(self, x: str, fin: int, fout: int, name: str = "fc") -> str:
        """MatMul by a constant, the bias Add with the constant first (as torch writes it)."""
        y = self.op("MatMul", [x, self.weight(fin, fout)], name=name)
        return self.op("Add", [self.const(np.full(fout, 0.1, np.float32)), y], name=f"{name}_b")

    def model(self, output: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "tokens", self.inputs, [], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=8)
        inferred = onnx.shape_inference.infer_shapes(model)
        model.graph.output.append(next(v for v in inferred.graph.value_info if v.name == output))
        onnx.checker.check_model(model)
        return model


def converted(model: onnx.ModelProto, tmp_path, feed=None, **kwargs):
    result = mrvl_convert.convert(model, tmp_path / "out", **kwargs)
    comparison = mrvl_convert.compare(model, result.out_dir, feed)
    assert comparison.passed, comparison.to_dict()
    return result


def layers(result) -> List[Dict]:
    found = []
    for stage in result.manifest["stages"]:
        if stage["kind"] == "mrvl":
            doc = json.loads((result.out_dir / stage["nodes_json"]).read_text())
            found += [n["attrs"] for n in doc["nodes"] if n["op"] == "tvm_op"]
    return found


def kinds(result) -> List[str]:
    return [a["layer_name"][0] for a in layers(result)]


def the(result, kind: str) -> Dict:
    [attrs] = [a for a in layers(result) if a["layer_name"] == [kind]]
    return attrs


def entry(result, name: str) -> Dict:
    return next(e for e in result.report["nodes"] if e["name"] == name)


def attention_scores(net: _Net, x: str, heads: int, depth: int, tokens: int) -> str:
    """[1, T, h*d] -> head split -> Q.K^T: scores [1, h, T, T] made inside the stage."""
    split = net.op("Reshape", [x, net.const(np.array([1, tokens, heads, depth], np.int64))])
    q = net.op("Transpose", [split], perm=[0, 2, 1, 3])
    k = net.op("Transpose", [split], perm=[0, 2, 3, 1])
    return net.op("MatMul", [q, k], name="qk")


def test_fc_on_a_token_tensor_is_written_as_the_codegen_writes_a_3d_dense(tmp_path):
    """CreateCompositeMrvlFcLayer: a 3-D input gets a trailing 1 and NHWC, in and out."""
    net = _Net(("x", [1, 5, 16]))
    y = net.op("Relu", [net.fc("x", 16, 24)], name="act")
    result = converted(net.model(y), tmp_path)
    attrs = the(result, "FC")
    assert attrs["composite_name"] == ["mrvl.fc_ni2no"]
    assert attrs["source_nodes"] == ["fc", "fc_b", "act"]
    assert attrs["data_layout"] == attrs["out_layout"] == ["NHWC"]
    assert attrs["data_layout_shape"] == ["1", "5", "16", "1"]
    assert attrs["out_layout_shape"] == ["1", "5", "24", "1"]
    assert attrs["func_name"] == ["n0_FC_NHWC"] and attrs["shape"] == [[1, 5, 24]]
    assert attrs["kernel_const"]["shape"] == [24, 16] and attrs["bias_const"]["shape"] == [1, 24]
    assert attrs["activation_type"] == ["relu"]
    assert kinds(result) == ["FC"]


def test_the_batch_limit_reads_the_batch_not_a_constant_operand(tmp_path):
    """Add(bias[32], x[16, 4, 32]): the batch is 16 (axis 0 of the activation), not 32."""
    net = _Net(("x", [16, 4, 32]))
    y = net.op("Add", [net.const(np.ones(32, np.float32)), net.fc("x", 32, 32)], name="add")
    result = mrvl_convert.convert(net.model(y), tmp_path / "out")
    # batch 16 runs as 16 runs of the profile's 1 (rules/batch_axis.py batch_runs); 32 would
    # be 32 runs
    assert [s.get("runs") for s in result.manifest["stages"] if s["kind"] == "mrvl"] == [16]
    assert "batch 32" not in json.dumps(result.report)


def test_attention_softmax_and_scale_keep_the_token_order(tmp_path):
    """Q.K^T -> Mul by one value -> Softmax on the last axis: a Mul2D (not a depthwise Conv2D
    that would need NHWC) and a Softmax on NHWC's C as the scores lie: no layout_transform."""
    net = _Net(("x", [1, 6, 16]))
    scores = attention_scores(net, net.fc("x", 16, 16), heads=2, depth=8, tokens=6)
    scaled = net.op("Mul", [scores, net.const(np.float32(0.125 * 3))], name="scale")
    result = converted(net.model(net.op("Softmax", [scaled], name="softmax", axis=-1)),
                       tmp_path)
    assert entry(result, "scale")["rule"] == "mrvl.mul"
    order = kinds(result)
    assert order[order.index("BatchMatmul"):] == ["BatchMatmul", "Mul2D", "Softmax"]
    softmax = the(result, "Softmax")
    assert softmax["data_layout"] == ["NHWC"]
    assert softmax["data_layout_shape"] == softmax["out_layout_shape"] == ["1", "2", "6", "6"]


def test_an_additive_mask_broadcasts_into_the_scores_as_a_sum2d(tmp_path):
    net = _Net(("x", [1, 6, 16]), ("mask", [1, 1, 1, 6]))
    scores = attention_scores(net, net.fc("x", 16, 16), heads=2, depth=8, tokens=6)
    masked = net.op("Add", [scores, "mask"], name="masked")
    feed = {"x": np.random.default_rng(1).standard_normal((1, 6, 16)).astype(np.float32),
            "mask": np.array([0, 0, 0, 0, -1e4, -1e4], np.float32).reshape(1, 1, 1, 6)}
    result = converted(net.model(net.op("Softmax", [masked], axis=-1)), tmp_path, feed)
    attrs = the(result, "Sum2D")
    assert attrs["composite_name"] == ["mrvl.sum2d"] and "input_const_name" not in attrs
    assert attrs["data_layout_shape_0"] == ["1", "2", "6", "6"]
    assert attrs["data_layout_shape_1"] == ["1", "1", "1", "6"]
    assert "layout_transform" not in kinds(result)[kinds(result).index("BatchMatmul"):]


def test_upstream_sum2d_still_adds_same_shapes_only(tmp_path):
    net = _Net(("x", [1, 4, 4, 4]), ("g", [1, 4, 1, 1]))
    y = net.op("Conv", ["x", net.weight(4, 4, 1, 1)], name="conv", kernel_shape=[1, 1])
    result = mrvl_convert.convert(net.model(net.op("Add", [y, "g"], name="add")),
                                  tmp_path / "out", layer_set="upstream-0.19")
    assert "differ in shape (broadcasting add)" in entry(result, "add")["reason"]


def test_softmax_over_the_last_axis_of_a_3d_tensor_is_written_with_c_last(tmp_path):
    """mrvl.py takes a 4-D softmax on NHWC axis 3: [B, T, C] is written [B, 1, T, C]."""
    net = _Net(("x", [1, 5, 12]))
    result = converted(net.model(net.op("Softmax", [net.fc("x", 12, 12)], axis=-1)), tmp_path)
    softmax = the(result, "Softmax")
    assert softmax["data_layout_shape"] == softmax["out_layout_shape"] == ["1", "1", "5", "12"]
    assert softmax["shape"] == [[1, 5, 12]]


def test_softmax_of_a_3d_batch_of_3_runs_as_it_is_written(tmp_path):
    """[3, T, C] written [3, 1, T, C]: the simulator reads it so (it once took only the trailing-1
    pad [3, T, C, 1] and refused the converter's own artifact for a batch above 1)."""
    net = _Net(("x", [3, 5, 12]))
    # a device of max_batch 8 compiles the batch of 3 as it is (the built-in's 1 would chunk it)
    result = converted(net.model(net.op("Softmax", ["x"], axis=-1)), tmp_path,
                       min_compute_layers=0, estimate=profile_of_batch(tmp_path, 8))
    assert the(result, "Softmax")["data_layout_shape"] == ["3", "1", "5", "12"]


def test_reduce_mean_over_the_last_axis_of_tokens(tmp_path):
    """mrvl.py reduce_mean: 3-D axis 2 (written R4 with a trailing 1, as the codegen does), and
    4-D axis 3 of a token tensor as it lies (no layout_transform after the BatchMatmul)."""
    net = _Net(("x", [1, 6, 16]))
    y = net.fc("x", 16, 16)
    mean3 = net.op("ReduceMean", [y], name="mean3", axes=[-1], keepdims=1)
    centred = net.op("Sub", [y, mean3], name="centre")
    scores = attention_scores(net, centred, heads=2, depth=8, tokens=6)
    mean4 = net.op("ReduceMean", [scores], name="mean4", axes=[3], keepdims=0)
    result = converted(net.model(mean4), tmp_path)
    means = [a for a in layers(result) if a["layer_name"] == ["ReduceMean"]]
    assert [m["axis"] for m in means] == [["2"], ["3"]]
    assert means[0]["data_layout_shape"] == ["1", "6", "16", "1"]
    assert means[0]["out_layout_shape"] == ["1", "6", "1", "1"]
    assert means[1]["data_layout_shape"] == ["1", "2", "6", "6"]
    assert entry(result, "centre")["rule"] == "mrvl.subtract"
    assert kinds(result)[-2:] == ["BatchMatmul", "ReduceMean"]


def test_reduce_mean_over_the_tokens_moves_them_last_first(tmp_path):
    """A mean over tokens ([B, T, C] axis 1, timm's global pool, before the head FC): one
    layout_transform to [B, C, T], then the layer's own axis 2; the FC reads [B, C]."""
    net = _Net(("x", [1, 6, 16]))
    pooled = net.op("ReduceMean", [net.fc("x", 16, 16)], name="pool", axes=[1], keepdims=0)
    result = converted(net.model(net.fc(pooled, 16, 4, name="head")), tmp_path)
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_nodes"] == 0
    assert kinds(result) == ["FC", "layout_transform", "ReduceMean", "FC"]
    mean = the(result, "ReduceMean")
    assert mean["axis"] == ["2"] and mean["data_layout_shape"] == ["1", "16", "6", "1"]
    assert mean["shape"] == [[1, 16]]


def test_head_split_and_merge_are_transposes_of_the_logical_axes(tmp_path):
    """[1, T, C] -> [1, T, h, d] -> [1, h, T, d] -> back: two transpose layers with axes
    (0, 2, 1, 3), which mrvl.py's transpose pattern lists, and no NHWC on the way."""
    net = _Net(("x", [1, 6, 16]))
    split = net.op("Reshape", [net.fc("x", 16, 16), net.const(np.array([1, 6, 2, 8], np.int64))])
    heads = net.op("Relu", [net.op("Transpose", [split], name="split", perm=[0, 2, 1, 3])])
    merged = net.op("Transpose", [heads], name="merge", perm=[0, 2, 1, 3])
    out = net.op("Reshape", [merged, net.const(np.array([1, 6, 16], np.int64))])
    result = converted(net.model(net.fc(out, 16, 4, name="proj")), tmp_path)
    assert kinds(result) == ["FC", "reshape", "transpose", "Relu", "transpose", "reshape", "FC"]
    assert [a["axes"] for a in layers(result) if a["layer_name"] == ["transpose"]] == [
        ["0", "2", "1", "3"]] * 2


def test_a_per_channel_mul_of_an_image_is_still_a_depthwise_conv2d(tmp_path):
    net = _Net(("x", [1, 3, 4, 4]))
    y = net.op("Relu", [net.op("Conv", ["x", net.weight(3, 3, 1, 1)], kernel_shape=[1, 1])])
    scale = net.const(np.array([0.5, 1.5, 2.0], np.float32).reshape(1, 3, 1, 1))
    result = converted(net.model(net.op("Mul", [y, scale], name="scale")), tmp_path)
    assert entry(result, "scale")["rule"] == "mrvl.channel_affine"


def test_a_causal_mask_computed_from_shapes_folds_into_a_sum2d_constant(tmp_path):
    """Range over the token count (read from the input's shape), Less, Where: constant once
    the shapes are fixed, so the masked scores are a Sum2D with an ``input_const_name``."""
    net = _Net(("x", [1, 6, 16]))
    count = net.op("Gather", [net.op("Shape", ["x"]), net.const(np.int64(1))], axis=0)
    steps = net.op("Range", [net.const(np.int64(0)), count, net.const(np.int64(1))])
    rows = net.op("Unsqueeze", [steps, net.const(np.array([1], np.int64))])
    cols = net.op("Unsqueeze", [steps, net.const(np.array([0], np.int64))])
    causal = net.op("Where", [net.op("Less", [rows, cols]), net.const(np.float32(-1e4)),
                              net.const(np.float32(0.0))], name="causal")
    scores = attention_scores(net, net.fc("x", 16, 16), heads=2, depth=8, tokens=6)
    masked = net.op("Add", [scores, causal], name="masked")
    result = converted(net.model(net.op("Softmax", [masked], axis=-1)), tmp_path)
    assert entry(result, "causal")["placement"] == "removed"
    assert entry(result, "masked")["rule"] == "mrvl.sum2d_const"
    attrs = the(result, "Sum2D")
    assert attrs["input_const"]["shape"] == [1, 1, 6, 6]
    assert attrs["input_const_shape"] == ["1", "1", "6", "6"]


def test_layer_by_layer_comparison_reads_token_layers_in_the_order_they_lie(tmp_path):
    """Scores [1, 4, 4, 4]: read back as NHWC or as they lie, the shape fits either way; the
    layers' own letters (func_name) say they lie in the model's order, so every layer compares."""
    net = _Net(("x", [1, 4, 16]))
    scores = attention_scores(net, net.fc("x", 16, 16), heads=4, depth=4, tokens=4)
    scaled = net.op("Mul", [scores, net.const(np.float32(0.5))], name="scale")
    model = net.model(net.op("Softmax", [scaled], name="softmax", axis=-1))
    result = mrvl_convert.convert(model, tmp_path / "out")
    comparison = mrvl_convert.compare(model, result.out_dir, layers=True)
    rows = {r.tensor: r for r in comparison.rows if r.kind == "layer"}
    assert {"qk_out", "scale_out"} <= set(rows)
    assert all(r.passed and "not compared" not in r.note for r in rows.values()), rows
