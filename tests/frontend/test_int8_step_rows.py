"""``frontend/int8_step_rows.py`` with ``step_heads.py`` and ``sequence_lift.py`` on a QDQ
CRNN head: the steps viewed as ``[T, 1, C]``, a Q/DQ pair, an int8 MatMul, a Q/DQ pair, a bias
Add and a Softmax. The head's MatMul comes to read ``[1, T, C]`` (an int8 FC at batch 1; on
integ9 it stayed on ``[T, 1, C]``, at batch T), and onnxruntime's outputs before and after are
bit-equal. Scales are powers of two and the input on the int8 grid, so every sum is exact."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.step_heads import lift_step_heads
from support.recurrent import run
from support.step_heads import joined_steps_model, lifted_heads, quantized_steps_nodes

T, D, K, C = 30, 2, 6, 5
S_IN, S_W, S_OUT = 2.0 ** -4, 2.0 ** -5, 2.0 ** -6


def _crnn_head(per_channel: bool = False) -> onnx.ModelProto:
    """``joined`` [1, T D K, 1, 1] -> Y [T, D, 1, K] -> [T, 1, D K] -> Q/DQ -> int8 MatMul ->
    Q/DQ -> Add of an int8 bias [C] -> Q/DQ -> ``logits`` [T, 1, C] -> Softmax -> ``out``
    (modelA_paper's head)."""
    rng = np.random.default_rng(5)
    s_w = np.full(C, S_W, np.float32) if per_channel else np.float32(S_W)
    inits = {"yshape": np.array([T, D, 1, K], np.int64),
             "fshape": np.array([T, 1, D * K], np.int64), "s_in": np.float32(S_IN),
             "s_w": s_w, "s_out": np.float32(S_OUT), "z8": np.int8(0),
             "zw": np.zeros(C, np.int8) if per_channel else np.int8(0),
             "wq": rng.integers(-127, 128, (D * K, C)).astype(np.int8),
             "bq": rng.integers(-64, 64, C).astype(np.int8)}
    make = helper.make_node
    nodes = quantized_steps_nodes() + [
             make("DequantizeLinear", ["wq", "s_w", "zw"], ["w"], name="w_dq",
                  **({"axis": 1} if per_channel else {})),
             make("MatMul", ["fdq", "w"], ["m"], name="head"),
             make("QuantizeLinear", ["m", "s_out", "z8"], ["mq"], name="m_q"),
             make("DequantizeLinear", ["mq", "s_out", "z8"], ["mdq"], name="m_dq"),
             make("DequantizeLinear", ["bq", "s_out", "z8"], ["bias"], name="b_dq"),
             make("Add", ["bias", "mdq"], ["scores"], name="head_bias"),
             make("QuantizeLinear", ["scores", "s_out", "z8"], ["sq"], name="scores_q"),
             make("DequantizeLinear", ["sq", "s_out", "z8"], ["logits"], name="scores_dq"),
             make("Softmax", ["logits"], ["out"], name="probs", axis=2)]
    return joined_steps_model("qdq_crnn_head", nodes, T * D * K,
                              {"out": [T, 1, C], "logits": [T, 1, C]}, inits)


def test_an_int8_head_on_unit_axis_steps_reads_one_batch_of_rows_bit_equal():
    model = _crnn_head()
    after, graph, done = lifted_heads(model)
    head = next(n for n in graph.nodes if n.name == "head")
    assert head.op == "MatMul" and list(head.inputs[0].shape) == [1, T, D * K]
    assert list(head.outputs[0].shape) == [1, T, C]
    dequant = head.inputs[0].inputs[0]
    quant = dequant.inputs[0].inputs[0]
    assert quant.op == "QuantizeLinear" and list(quant.inputs[0].shape) == [1, T, D * K]
    assert "[T, C]" in done.rewritten["head"]
    bias = next(n for n in graph.nodes if n.name == "head_bias")  # the int8 bias Add at batch 1
    assert list(bias.outputs[0].shape) == [1, T, C]
    rng = np.random.default_rng(0)  # on the input's int8 grid: the QuantizeLinear is exact
    x = {"joined": (rng.integers(-127, 128, (1, T * D * K, 1, 1)) * S_IN).astype(np.float32)}
    want, got = run(model, x), run(after, x)
    for name in ("out", "logits"):
        assert got[name].shape == (T, 1, C) and np.array_equal(want[name], got[name])


def test_a_per_channel_weight_keeps_the_head_on_its_view():
    """No int8 FC takes a per-channel weight here: the head is left on ``[T, 1, C]``."""
    graph, done = gs.import_onnx(_crnn_head(per_channel=True)), Rewrites()
    lift_step_heads(graph, [graph.inputs[0]], 14, done)
    head = next(n for n in graph.nodes if n.name == "head")
    assert list(head.inputs[0].shape) == [T, 1, D * K] and "head" not in done.rewritten
