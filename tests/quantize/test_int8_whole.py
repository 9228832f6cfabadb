"""Issue 45: an int8 model as whole as its fp16 conversion. A madmom-like network on a batchless
``[frames, bins]`` input (``support.strategies.int8_whole``), quantized by our recipe, was cut
where its fp16 twin is not, by three mechanisms that did not see through the QDQ pairs:

- its zero Pads stayed on CPU: each sits before QDQ pairs, never beside its Conv
  (``frontend/qdq_pads.py`` folds them into the Conv);
- the lift of its ``[T, F]`` input read the input's own QDQ pair as a batch reader, so the
  subgraph would be compiled at batch T (``rules/batch_axis.py``);
- with the Pad folded, the batch norm's Mul -> Add -> Elu left in float by the quantizer was
  refused an fp16 layer (``rules/checks_elementwise.check_float_region``).

A keras global max pool, ``ReduceMax(Transpose(x))``, read the Transpose through its QDQ pair,
so ``frontend/global_max.py`` did not make it a GlobalMaxPool (speechmos's DNSMOS: 3 Mrvl / 2
CPU in int8, 2 / 1 in fp16).

On main the test model converts to 2 Mrvl / 2 CPU subgraphs (madmom's key CNN: 9 / 10); here
1 / 1 as in fp16, verify bit-equal against its QDQ model."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.global_max import rewrite_global_max
from mrvl_convert.frontend.qdq_pads import fold_qdq_pads
from mrvl_convert.rules.batch_axis import axis0_is_batch
from mrvl_convert.rules.checks_elementwise import check_float_region
from support.int8 import converted_int8
from support.strategies.int8_whole import (FramesNet, assert_bit_equal, convert_frames_net,
                                           keras_max_pool, reflect_padded, verify_bit_equal)


def test_a_frames_network_in_int8_is_as_whole_as_in_fp16(tmp_path):
    net = FramesNet()
    fp16 = convert_frames_net(net, tmp_path / "fp16", quantize=False).summary
    got = convert_frames_net(net, tmp_path / "int8")
    counts = (got.summary["mrvl_subgraphs"], got.summary["cpu_subgraphs"])
    assert counts == (fp16["mrvl_subgraphs"], fp16["cpu_subgraphs"]) == (1, 1)
    assert got.report["precision"]["shares"]["int8"] == 1.0
    cpu = {n["name"] for n in got.report["nodes"] if n["placement"] == "cpu"}
    # The CPU stage is the lift alone (x to [1, T, F]): the input's pair is lifted with the frames.
    assert cpu == set()
    [stage] = [s for s in got.manifest["stages"] if s["kind"] == "cpu"]
    assert [s["tensor"] for s in stage["outputs"]] == ["x_seq"]
    merged = {n["name"]: n.get("merged_into") for n in got.report["nodes"]}
    assert merged["pad0"] == "conv0" and merged["pad1"] == "conv1"
    verify_bit_equal(got, net)


def _qdq(name: str, src: str, dst: str, scale: str = "s", zero: str = "z") -> list:
    return [helper.make_node("QuantizeLinear", [src, scale, zero], [f"{name}_q"], name=f"{name}_Q"),
            helper.make_node("DequantizeLinear", [f"{name}_q", scale, zero], [dst],
                             name=f"{name}_DQ")]


def _padded_qdq_model(zero_point: int, reshape: bool = False,
                      pads=(0, 0, 1, 2, 0, 0, 2, 1)) -> onnx.ModelProto:
    """x -> Q/DQ -> Pad(0) -> Q/DQ -> Transpose -> Q/DQ -> Conv -> y, the Conv's weight
    dequantized: the Pad reaches the Conv only through pairs and a Transpose (NHWC -> NCHW), or
    (``reshape``, one channel) tf2onnx's Reshape ``[1, H, W, 1] -> [1, 1, H, W]``."""
    rng = np.random.default_rng(3)
    channels = 1 if reshape else 2
    nhwc = [pads[i] for i in (0, 2, 3, 1)] + [pads[i] for i in (4, 6, 7, 5)]
    to_nchw = helper.make_node("Reshape", ["pd", "nchw"], ["t"], name="to_nchw") if reshape \
        else helper.make_node("Transpose", ["pd"], ["t"], perm=[0, 3, 1, 2], name="to_nchw")
    nodes = [*_qdq("x", "x", "xd"),
             helper.make_node("Pad", ["xd", "pads"], ["p"], name="pad"),
             *_qdq("p", "p", "pd"), to_nchw, *_qdq("t", "t", "td"),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], name="w_DQ"),
             helper.make_node("Conv", ["td", "w"], ["y"], pads=[1, 0, 0, 1], name="conv")]
    zero_type = TensorProto.UINT8 if zero_point else TensorProto.INT8
    zero = numpy_helper.from_array(np.array(zero_point, helper.tensor_dtype_to_np_dtype(
        zero_type)), "z")
    inits = [numpy_helper.from_array(np.array(nhwc, np.int64), "pads"),
             numpy_helper.from_array(np.array([1, 1, 8, 9], np.int64), "nchw"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s"), zero,
             numpy_helper.from_array(rng.integers(-60, 60, (3, channels, 3, 3)).astype(np.int8),
                                     "wq"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ws")]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 6, channels])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_a_zero_pad_folds_into_its_conv_through_qdq_pairs_bit_for_bit():
    """Symmetric int8 and asymmetric uint8 (zero point 128: the Pad's zero is the zero point
    between the pairs; its value the DequantizeLinear of a quantized 0, as DeepFilterNet's
    encoder has it), through a Transpose or a unit-axis Reshape (its target then the unpadded
    shape): onnxruntime gives the same bits before and after."""
    for zero_point, reshape in ((0, False), (128, False), (0, True), (128, True)):
        model = _padded_qdq_model(zero_point, reshape)
        if zero_point:  # the quantizer's own pad value: DequantizeLinear(z, s, z) = 0
            model.graph.node[2].input.append("v")
            model.graph.node.insert(2, helper.make_node("DequantizeLinear", ["z", "s", "z"],
                                                        ["v"], name="v_DQ"))
        graph = gs.import_onnx(model)
        done = Rewrites()
        assert fold_qdq_pads(graph, done)
        graph.cleanup().toposort()
        after = gs.export_onnx(graph)
        assert "Pad" not in {n.op_type for n in after.graph.node}
        assert done.merged == {"pad": "conv"}
        conv = next(n for n in graph.nodes if n.op == "Conv")
        assert conv.attrs["pads"] == [1 + 1, 0 + 2, 0 + 2, 1 + 1]
        x = np.random.default_rng(zero_point).uniform(
            -3, 3, (1, 5, 6, 1 if reshape else 2)).astype(np.float32)
        expected, got = _run(model, x), _run(after, x)
        assert expected.shape == got.shape == (1, 3, 7, 8)
        np.testing.assert_array_equal(got, expected)


def test_a_pad_of_another_value_read_twice_or_reshaped_stays():
    model = _padded_qdq_model(0)
    assert model.graph.node[2].op_type == "Pad"
    model.graph.node[2].input.append("")
    model.graph.node[2].input.append("one")
    model.graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), "one"))
    assert not fold_qdq_pads(gs.import_onnx(model), Rewrites())
    twice = _padded_qdq_model(0)
    twice.graph.output.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, None))
    assert not fold_qdq_pads(gs.import_onnx(twice), Rewrites())
    # a Reshape that reorders the padded axes' elements is no view of them
    mixed = _padded_qdq_model(0, reshape=True)
    target = next(i for i in mixed.graph.initializer if i.name == "nchw")
    target.CopyFrom(numpy_helper.from_array(np.array([1, 1, 9, 8], np.int64), "nchw"))
    del mixed.graph.value_info[:]
    assert not fold_qdq_pads(gs.import_onnx(onnx.shape_inference.infer_shapes(mixed)),
                             Rewrites())


def test_a_batchless_input_is_lifted_through_its_qdq_pair():
    """``[T, F] -> Q -> DQ -> Unsqueeze(0)``: axis 0 is data, as without the pair (main read
    the QuantizeLinear as a batch reader)."""
    nodes = [*_qdq("x", "x", "xd"),
             helper.make_node("Unsqueeze", ["xd", "axis0"], ["y"], name="lift")]
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [20, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, 6])], inits)
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    imported = gs.import_onnx(model)
    assert not axis0_is_batch(imported, imported.inputs[0])


def test_a_float_span_without_macs_between_pairs_takes_fp16_layers():
    """DQ -> Mul -> Add -> Elu -> Q: the quantizer left the three in float (no pair between
    them), so no int8 layer (DQ -> op -> Q) can take any; each is an fp16 layer. A lone
    DQ -> Mul -> Q, and a Conv's own Conv -> Relu -> Q, keep their int8 forms."""
    scale = gs.Constant("s", np.array(0.05, np.float32))
    zero = gs.Constant("z", np.array(0, np.int8))
    tensors = {k: gs.Variable(k, np.float32, [1, 4, 4, 2]) for k in ("xd", "m", "a", "e")}
    quantized = gs.Variable("xq", np.int8, [1, 4, 4, 2])
    dq = gs.Node("DequantizeLinear", "dq", inputs=[quantized, scale, zero],
                 outputs=[tensors["xd"]])
    mul = gs.Node("Mul", "mul", inputs=[tensors["xd"], gs.Constant("c", np.ones(2, np.float32))],
                  outputs=[tensors["m"]])
    add = gs.Node("Add", "add", inputs=[tensors["m"], gs.Constant("d", np.ones(2, np.float32))],
                  outputs=[tensors["a"]])
    elu = gs.Node("Elu", "elu", inputs=[tensors["a"]], outputs=[tensors["e"]])
    q = gs.Node("QuantizeLinear", "q", inputs=[tensors["e"], scale, zero],
                outputs=[gs.Variable("eq", np.int8, [1, 4, 4, 2])])
    graph = gs.Graph(nodes=[dq, mul, add, elu, q], inputs=[quantized], outputs=[q.outputs[0]])
    assert all(check_float_region(n, {}, graph) is None for n in (mul, add, elu))
    # alone between a pair, the Mul is an int8 Mul2D's, not an fp16 layer's
    mul.outputs[0] = tensors["e"]
    lone = gs.Graph(nodes=[dq, mul, q], inputs=[quantized], outputs=[q.outputs[0]])
    assert check_float_region(mul, {}, lone) is not None


def test_an_int8_keras_max_pool_is_one_subgraph_and_bit_equal(tmp_path):
    """Its pool read the Transpose's QDQ pair, so the global-max form never saw the Transpose:
    a ReduceMax of a 4-D tensor, on CPU between two Mrvl subgraphs (main: 2 / 1). The pool now
    reads a copy of the pair on the NCHW tensor: 1 / 0, bit-equal to the QDQ model."""
    result, qdq = converted_int8(keras_max_pool(), tmp_path / "out")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    rules = {e["name"]: e.get("rule") for e in result.placements}
    assert rules["pool"] == "mrvl.globalmaxpool2d_nhwc2nhwc", rules
    feeds = [{"x": f} for f in np.random.default_rng(6).uniform(-1, 1, (3, 1, 3, 9, 7))
             .astype(np.float32)]
    assert_bit_equal(qdq, result, feeds)
    # the rewrite alone, on the QDQ model: onnxruntime gives the same bits before and after
    model = onnx.shape_inference.infer_shapes(onnx.load(str(qdq)))
    graph = gs.import_onnx(model)
    done = Rewrites()
    assert rewrite_global_max(graph, done) and done.rewritten["pool"].startswith("ReduceMax")
    after = gs.export_onnx(graph.cleanup().toposort())
    assert "ReduceMax" not in {n.op_type for n in after.graph.node}
    for feed in feeds:
        np.testing.assert_array_equal(_run(after, feed["x"]), _run(model, feed["x"]))


def test_an_int8_reflect_pad_is_fp16_selections_inside_the_region(tmp_path):
    """A reflect or edge Pad between QDQ pairs stayed on CPU (``pad_forms.py`` left an int8
    region's Pad alone): 2 Mrvl / 1 CPU on main. Its selection forms run as fp16 layers
    between the region's quant layers: 1 / 0, bit-equal to the QDQ model."""
    for mode in ("reflect", "edge"):
        result, qdq = converted_int8(reflect_padded(mode), tmp_path / mode)
        assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
        rules = {e["name"]: e.get("rule") for e in result.placements}
        assert rules["conv0"] == rules["conv1"] == "mrvl.qnn_conv2d", rules
        feeds = [{"x": f} for f in np.random.default_rng(8).uniform(-1, 1, (3, 1, 3, 9, 8))
                 .astype(np.float32)]
        assert_bit_equal(qdq, result, feeds)
