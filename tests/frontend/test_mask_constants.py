"""An attention mask as current transformers build it, ``(1 - mask) * finfo(float32).min``,
has its constant clamped to -32752 (frontend/mask_constants.py), and so has torch's
``masked_fill`` form of it (a Where). Before, the BERT converted but its artifact did not run:
the simulator raised Fp16RangeError on the Mul2D constant (on the masked_fill form: on the
-3.4e38 mask entering the Mrvl stage).

The rewritten graph runs on onnxruntime against the original: bit-equal Softmax weights within
the stated bound (scores within +-16300, every row with an unmasked position), and the stated
difference on a row with every position masked.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import mrvl_convert
from mrvl_convert.frontend.mask_constants import clamp_mask_constants
from mrvl_convert.runtime.session import HybridSession
from support import corpus_dynamo

FMIN = float(np.finfo(np.float32).min)
ROWS, KEYS = 8, 16


def _masked_softmax(extra_reader: bool = False) -> onnx.ModelProto:
    nodes = [helper.make_node("Sub", ["one", "mask"], ["inverted"]),
             helper.make_node("Mul", ["inverted", "fmin"], ["additive"], name="mask_mul"),
             helper.make_node("Add", ["scores", "additive"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["weights"], axis=-1)]
    outputs = [helper.make_tensor_value_info("weights", TensorProto.FLOAT, [ROWS, KEYS])]
    if extra_reader:
        nodes.append(helper.make_node("Identity", ["additive"], ["additive_out"]))
        outputs.append(helper.make_tensor_value_info("additive_out", TensorProto.FLOAT,
                                                     [1, KEYS]))
    inits = [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("fmin", TensorProto.FLOAT, [], [FMIN])]
    graph = helper.make_graph(
        nodes, "masked_softmax",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [ROWS, KEYS]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, KEYS])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rewritten(model: onnx.ModelProto):
    graph = gs.import_onnx(model)
    changed = clamp_mask_constants(graph)
    return gs.export_onnx(graph.cleanup()), changed


def _run(model: onnx.ModelProto, feed):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["weights"], feed)[0]


def test_the_clamped_mask_gives_the_same_weights_bit_for_bit_within_the_bound():
    model = _masked_softmax()
    rewritten, changed = _rewritten(model)
    assert list(changed) == ["mask_mul"] and "-32752" in changed["mask_mul"]
    rng = np.random.default_rng(0)
    for seed in range(20):
        mask = (rng.random((1, KEYS)) < 0.6).astype(np.float32)
        mask[0, rng.integers(KEYS)] = 1.0  # at least one position unmasked
        scale = [1.0, 100.0, 16300.0][seed % 3]
        scores = np.clip(rng.standard_normal((ROWS, KEYS)) * scale, -16300, 16300)
        feed = {"scores": scores.astype(np.float32), "mask": mask}
        assert np.array_equal(_run(model, feed), _run(rewritten, feed)), seed


def test_a_row_with_every_position_masked_gets_softmax_of_the_shifted_scores_as_stated():
    model = _masked_softmax()
    rewritten, _ = _rewritten(model)
    scores = np.random.default_rng(1).standard_normal((ROWS, KEYS)).astype(np.float32)
    feed = {"scores": scores, "mask": np.zeros((1, KEYS), np.float32)}
    assert np.allclose(_run(model, feed), 1.0 / KEYS)
    shifted = scores + np.float32(-32752.0)  # float32: scores rounded to steps of 2**-9
    expected = np.exp(shifted - shifted.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    assert np.allclose(_run(rewritten, feed), expected, rtol=1e-5, atol=1e-7)


def test_a_mul_read_by_anything_but_a_softmax_add_keeps_its_constant():
    _, changed = _rewritten(_masked_softmax(extra_reader=True))
    assert changed == {}


def _masked_fill(model: onnx.ModelProto) -> onnx.ModelProto:
    """The BERT's mask Mul as torch's ``masked_fill(inverted.bool(), finfo.min)`` exports it:
    Where(Cast(inverted, bool), finfo.min, inverted)."""
    graph = model.graph
    mul = next(n for n in graph.node if n.name == "node_Mul_23")
    at = list(graph.node).index(mul)
    nodes = [helper.make_node("Cast", [mul.input[0]], ["inverted_bool"], to=TensorProto.BOOL),
             helper.make_node("Where", ["inverted_bool", mul.input[1], mul.input[0]],
                              [mul.output[0]], name="node_Mul_23")]
    del graph.node[at]
    for k, node in enumerate(nodes):
        graph.node.insert(at + k, node)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("form", ["mul", "masked_fill"])
def test_a_bert_with_the_finfo_min_mask_converts_runs_and_verifies(tmp_path, form):
    model = corpus_dynamo.dynamo_bert(mask_value=FMIN)
    if form == "masked_fill":
        model = _masked_fill(model)
    result = mrvl_convert.convert(model, tmp_path / "art", shapes=corpus_dynamo.bert_shapes())
    entry = next(e for e in result.report["nodes"] if e["name"] == "node_Mul_23")
    feeds = [corpus_dynamo.bert_feeds(seed) for seed in range(4)]
    comparison = mrvl_convert.compare(model, tmp_path / "art", feeds)
    assert comparison.passed, comparison
    assert comparison.range_events == []
    # The default session (range errors raise) runs it too.
    assert HybridSession(tmp_path / "art").run(None, feeds[0])[0].shape == (1, 16, 128)
    assert "clamped to -32752" in entry["canonical"], entry


def _t5_mask(output_bias: bool = False) -> onnx.ModelProto:
    """T5's form: the mask Sliced, added once to the position bias, then to each layer's scores
    (through a float Cast) before its Softmax."""
    node = helper.make_node
    nodes = [node("Sub", ["one", "mask"], ["inverted"]),
             node("Mul", ["inverted", "fmin"], ["additive"], name="mask_mul"),
             node("Slice", ["additive", "starts", "ends", "axes"], ["sliced"]),
             node("Add", ["bias", "sliced"], ["biased"], name="bias_add"),
             node("Add", ["scores", "biased"], ["logits"]),
             node("Cast", ["logits"], ["logits32"], to=TensorProto.FLOAT),
             node("Softmax", ["logits32"], ["weights"], axis=-1),
             node("Add", ["scores2", "biased"], ["logits2"]),
             node("Softmax", ["logits2"], ["weights2"], axis=-1)]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [ROWS, KEYS])
               for n in ("weights", "weights2")]
    if output_bias:
        outputs.append(helper.make_tensor_value_info("biased", TensorProto.FLOAT, [ROWS, KEYS]))
    inits = [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("fmin", TensorProto.FLOAT, [], [FMIN]),
             helper.make_tensor("starts", TensorProto.INT64, [1], [0]),
             helper.make_tensor("ends", TensorProto.INT64, [1], [KEYS]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    graph = helper.make_graph(
        nodes, "t5_mask",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [ROWS, KEYS])
         for n in ("scores", "scores2", "bias")]
        + [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, KEYS])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_t5s_sliced_mask_added_to_the_position_bias_is_clamped_bit_equal_within_the_bound():
    """On main the Slice between the Mul and the Adds kept finfo.min: -inf in fp16."""
    model = _t5_mask()
    rewritten, changed = _rewritten(model)
    assert list(changed) == ["mask_mul"]
    rng = np.random.default_rng(2)
    names = ["weights", "weights2"]
    for seed in range(10):
        mask = (rng.random((1, KEYS)) < 0.6).astype(np.float32)
        mask[0, 0] = 1.0
        feed = {"mask": mask, **{n: (rng.standard_normal((ROWS, KEYS)) * 50).astype(np.float32)
                                 for n in ("scores", "scores2", "bias")}}
        before = ort.InferenceSession(model.SerializeToString()).run(names, feed)
        after = ort.InferenceSession(rewritten.SerializeToString()).run(names, feed)
        for a, b in zip(after, before):
            assert np.array_equal(a, b), seed


def test_a_mask_sum_that_is_a_model_output_is_not_clamped():
    _, changed = _rewritten(_t5_mask(output_bias=True))
    assert changed == {}
