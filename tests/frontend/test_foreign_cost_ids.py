"""The requantization cost of another quantizer's model is measured on ids over the vocabulary
and realistic masks (``foreign_cost.drawn_feeds`` through ``frontend/vocabulary.draw_input``),
not on 0/1 ids where a Reshape sits before the Gather (the T5 encoder's printed cost was measured
on 0/1 ids and random 0/1 masks: a near-vacuous figure)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.foreign_cost import drawn_feeds, foreign_int8_section
from mrvl_convert.frontend.vocabulary import input_kinds

VOCAB, T, D, E = 16, 6, 8, 4


# A uint8 activation range with a zero point: [-3 s, 252 s], s = 100/255, about [-1.2, 98.8];
# requantized to symmetric int8 it covers [-98.8, 98.8] and no longer saturates below -1.2.
ACT_SCALE, ACT_ZERO = 100.0 / 255, 3


def _table(rng: np.random.Generator) -> np.ndarray:
    """Rows 0 and 1 inside the calibrated range, the others far below it: the given model
    saturates them at -1.2, the requantized one does not, so only rows >= 2 cost."""
    table = rng.uniform(0, 90, (VOCAB, D)).astype(np.float32)
    table[2:] = rng.uniform(-60, -10, (VOCAB - 2, D))
    return table


def id_model(mask: bool = False) -> onnx.ModelProto:
    """ids [1, T] -> Reshape [T] -> Gather(table) -> uint8 Q/DQ -> MatMul by an int8 weight ->
    [T, E]; with ``mask``, an int64 attention mask [1, T] added (as ``(1 - mask) * -1e4``) to
    the transposed scores before a Softmax."""
    rng = np.random.default_rng(0)
    weight = rng.integers(-127, 128, (D, E)).astype(np.int8)
    inits = [numpy_helper.from_array(_table(rng), "table"),
             numpy_helper.from_array(np.array([T], np.int64), "flat"),
             numpy_helper.from_array(np.float32(ACT_SCALE), "act_scale"),
             numpy_helper.from_array(np.uint8(ACT_ZERO), "act_zero"),
             numpy_helper.from_array(weight, "w_q"),
             numpy_helper.from_array(np.float32(0.01), "w_scale"),
             numpy_helper.from_array(np.int8(0), "w_zero")]
    nodes = [
        helper.make_node("Reshape", ["ids", "flat"], ["ids_flat"], name="ids_flat"),
        helper.make_node("Gather", ["table", "ids_flat"], ["emb"], name="embed"),
        helper.make_node("QuantizeLinear", ["emb", "act_scale", "act_zero"], ["emb_q"],
                         name="emb_q"),
        helper.make_node("DequantizeLinear", ["emb_q", "act_scale", "act_zero"], ["emb_dq"],
                         name="emb_dq"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], name="w_dq"),
        helper.make_node("MatMul", ["emb_dq", "w"], ["y"], name="proj")]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, T])]
    output = "y"
    if mask:
        inits += [numpy_helper.from_array(np.float32(1.0), "one"),
                  numpy_helper.from_array(np.float32(-1e4), "big")]
        nodes += [
            helper.make_node("Cast", ["mask"], ["mask_f"], name="mask_cast", to=TensorProto.FLOAT),
            helper.make_node("Sub", ["one", "mask_f"], ["inverted"], name="mask_sub"),
            helper.make_node("Mul", ["inverted", "big"], ["bias"], name="mask_mul"),
            helper.make_node("Transpose", ["y"], ["scores_t"], name="scores_t", perm=[1, 0]),
            helper.make_node("Add", ["scores_t", "bias"], ["scores"], name="mask_add"),
            helper.make_node("Softmax", ["scores"], ["probs"], name="softmax", axis=-1)]
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT64, [1, T]))
        output = "probs"
    shape = [E, T] if mask else [T, E]
    graph = helper.make_graph(nodes, "foreign_ids", inputs,
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def test_ids_behind_a_reshape_are_drawn_over_the_vocabulary() -> None:
    feeds = drawn_feeds(id_model())
    ids = np.concatenate([f["ids"].ravel() for f in feeds])
    assert ids.max() >= 2 and ids.max() < VOCAB


def test_the_printed_cost_is_the_cost_on_the_vocabulary() -> None:
    """Rows 0/1 cost under half a step of the wider int8 grid, rows >= 2 their lost saturation:
    on 0/1 ids the printed cost was near 0, over the vocabulary it is what the rewrite costs."""
    _, section, _ = foreign_int8_section(id_model(), "requantize")
    assert section["activations"] >= 1, section["line"]
    (figures,) = section["cost"]["outputs"].values()
    assert figures["rel"] > 0.5 and figures["cosine"] < 0.9, section["line"]
    assert "ids ids below 16" in section["line"]


def test_a_mask_is_drawn_as_a_padded_sequence() -> None:
    model = id_model(mask=True)
    assert input_kinds(model).masks == {"mask"}
    feeds = drawn_feeds(model)
    assert np.all(feeds[0]["mask"] == 1)  # the first sample: no padding
    for feed in feeds[1:]:
        row = feed["mask"][0]
        length = int(row.sum())
        assert length >= 1 and np.all(row[:length] == 1) and np.all(row[length:] == 0)
    assert any(feed["mask"].sum() < T for feed in feeds[1:])
    _, section, _ = foreign_int8_section(model, "requantize")
    assert "mask a padded mask" in section["line"]


def test_an_integer_input_of_no_known_kind_is_named_as_drawn_0_1() -> None:
    """An integer read as a number (no table, no mask) is drawn 0/1, and the line says so."""
    plain = helper.make_graph(
        [helper.make_node("Cast", ["n"], ["nf"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "nf"], ["y"], name="mul")], "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(plain)
    from mrvl_convert.frontend.foreign_cost import drawn_how  # integ11 had none
    assert set(np.unique(np.concatenate([f["n"] for f in drawn_feeds(model)]))) <= {0, 1}
    assert "n 0/1" in drawn_how(model)
