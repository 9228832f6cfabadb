"""``frontend/step_heads.py`` then ``sequence_lift.py`` on a QDQ per-step head: the int8 Gemm
(read through a QuantizeLinear / DequantizeLinear, its weight and bias dequantized int8 and
int32 constants) becomes an int8 MatMul by its own dequantized ``B^T`` and an Add of the bias,
and the lift carries the Q/DQ pair with it to ``[1, T, C]``. Scales are powers of two and the
inputs on the int8 grid, so every sum is exact in float32 and onnxruntime's outputs before and
after are bit-equal (the Gemm's own bound, stated in the module, then is 0)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.step_heads import lift_step_heads
from support.recurrent import run
from support.step_heads import joined_steps_model, lifted_heads, quantized_steps_nodes

T, D, K, C = 30, 2, 6, 5
S_IN, S_W, S_OUT = 2.0 ** -4, 2.0 ** -5, 2.0 ** -6


def _qdq_gemm_model() -> onnx.ModelProto:
    """``joined`` [1, T D K, 1, 1] -> Y [T, D, 1, K] -> [T, D K] -> Q/DQ -> int8 Gemm(transB)
    -> Q/DQ -> ``out`` [T, C]."""
    rng = np.random.default_rng(4)
    inits = {"yshape": np.array([T, D, 1, K], np.int64), "fshape": np.array([T, D * K], np.int64),
             "s_in": np.float32(S_IN), "s_w": np.float32(S_W), "s_b": np.float32(S_IN * S_W),
             "s_out": np.float32(S_OUT), "z8": np.int8(0), "z32": np.int32(0),
             "wq": rng.integers(-127, 128, (C, D * K)).astype(np.int8),
             "bq": rng.integers(-3000, 3000, C).astype(np.int32)}
    make = helper.make_node
    nodes = quantized_steps_nodes() + [
             make("DequantizeLinear", ["wq", "s_w", "z8"], ["w"], name="w_dq"),
             make("DequantizeLinear", ["bq", "s_b", "z32"], ["b"], name="b_dq"),
             make("Gemm", ["fdq", "w", "b"], ["g"], name="head", transB=1),
             make("QuantizeLinear", ["g", "s_out", "z8"], ["gq"], name="out_q"),
             make("DequantizeLinear", ["gq", "s_out", "z8"], ["out"], name="out_dq")]
    return joined_steps_model("qdq_head", nodes, T * D * K, {"out": [T, C], "g": [T, C]}, inits)


def test_an_int8_gemm_head_is_lifted_as_an_int8_matmul_and_bias_add_bit_equal():
    model = _qdq_gemm_model()
    after, graph, done = lifted_heads(model)
    head = next(n for n in graph.nodes if n.name == "head")
    assert head.op == "MatMul" and list(head.inputs[0].shape) == [1, T, D * K]
    weight = head.inputs[1].inputs[0]  # the int8 B^T [C_in, O] behind its own DequantizeLinear
    assert weight.op == "DequantizeLinear" and weight.inputs[0].values.shape == (D * K, C)
    assert weight.inputs[0].values.dtype == np.int8
    [add] = head.outputs[0].outputs
    assert add.op == "Add" and add.inputs[1].inputs[0].name == "b_dq"
    [quant] = [n for n in add.outputs[0].outputs if n.op != "Squeeze"]  # g is an output too
    assert quant.op == "QuantizeLinear" and list(quant.outputs[0].shape) == [1, T, C]
    assert "Gemm" in done.rewritten["head"]
    rng = np.random.default_rng(0)  # on the input's int8 grid: the QuantizeLinear is exact
    x = {"joined": (rng.integers(-127, 128, (1, T * D * K, 1, 1)) * S_IN).astype(np.float32)}
    want, got = run(model, x), run(after, x)
    assert np.array_equal(want["g"], got["g"]) and np.array_equal(want["out"], got["out"])
    assert got["out"].shape == (T, C)


def test_a_per_channel_weight_keeps_its_gemm():
    """A weight dequantized per channel (a 1-D scale of C values) is no int8 FC the layer takes:
    the Gemm stays and nothing after the head's QuantizeLinear is lifted."""
    model = _qdq_gemm_model()
    scale = next(i for i in model.graph.initializer if i.name == "s_w")
    scale.CopyFrom(numpy_helper.from_array(np.full(C, S_W, np.float32), "s_w"))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(C, np.int8), "zc"))
    next(n for n in model.graph.node if n.name == "w_dq").input[2] = "zc"
    next(n for n in model.graph.node if n.name == "w_dq").attribute.append(
        helper.make_attribute("axis", 0))
    graph, done = gs.import_onnx(model), Rewrites()
    lift_step_heads(graph, [graph.inputs[0]], 14, done)
    assert next(n for n in graph.nodes if n.name == "head").op == "Gemm"


def test_the_fc_bias_check_takes_the_product_scale_only():
    """``rules/qnn_bias.py`` on the lifted head: the int32 bias in input x weight scale is the
    FC's; in another scale (the layer could not add it in its accumulator) it is refused."""
    from mrvl_convert.rules.qnn_bias import check_qdq_bias
    _, graph, _ = lifted_heads(_qdq_gemm_model())
    add = next(n for n in graph.nodes if n.op == "Add")
    assert check_qdq_bias(add, {}, graph) is None
    add.inputs[1].inputs[0].inputs[1] = gs.Constant("s_b2", np.array(2 * S_IN * S_W, np.float32))
    assert "is not input_scale x weight_scale" in check_qdq_bias(add, {}, graph)["detail"]


def _fused_gemm_model() -> onnx.ModelProto:
    """onnxruntime's MatMulAddFusion form (quant_pre_process on a CRNN, rec-model): the Gemm's
    product Q/DQ, a Reshape ``[T, C] -> [1, T, C]``, Q/DQ, Softmax -> ``out`` [1, T, C]."""
    model = _qdq_gemm_model()
    make, g = helper.make_node, model.graph
    g.initializer.append(numpy_helper.from_array(np.array([1, T, C], np.int64), "oshape"))
    g.node.extend([make("Reshape", ["out", "oshape"], ["o3"], name="gemm_output_reshape"),
                   make("QuantizeLinear", ["o3", "s_out", "z8"], ["o3q"], name="o3_q"),
                   make("DequantizeLinear", ["o3q", "s_out", "z8"], ["o3dq"], name="o3_dq"),
                   make("Softmax", ["o3dq"], ["probs"], name="softmax", axis=-1)])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, [1, T, C]))
    return onnx.shape_inference.infer_shapes(model)


def test_a_reshape_to_one_sample_after_the_heads_pair_closes_the_lift_bit_equal():
    """On integ9 the Reshape ``[T, C] -> [1, T, C]`` did not lift, so neither did the Q/DQ
    before it: a Squeeze sat between the bias Add and its QuantizeLinear, the int8 FC lost its
    pattern (rec-model's head an fp16 BatchMatmul of batch 96, its bias Add on CPU)."""
    model = _fused_gemm_model()
    after, graph, done = lifted_heads(model)
    head = next(n for n in graph.nodes if n.name == "head")
    [add] = head.outputs[0].outputs
    [quant] = add.outputs[0].outputs
    assert quant.op == "QuantizeLinear" and list(quant.outputs[0].shape) == [1, T, C]
    assert not [n for n in graph.nodes if n.op in ("Squeeze", "Reshape")
                and n.inputs[0].name.startswith("out")]
    assert "gemm_output_reshape" in done.merged
    rng = np.random.default_rng(0)
    x = {"joined": (rng.integers(-127, 128, (1, T * D * K, 1, 1)) * S_IN).astype(np.float32)}
    want, got = run(model, x), run(after, x)
    assert np.array_equal(want["probs"], got["probs"])
