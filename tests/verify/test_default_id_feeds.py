"""Verify's default feeds draw a token-id input over its vocabulary and a mask as a padded
sequence's (issue 45, idfeeds): with 0/1 ids a verdict read two rows of the embedding and said
nothing of the rest (an embedding whose rows >= 2 leave fp16's range PASSed); an integer input
of no known kind is still drawn 0/1, and the verdict line says so."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.cli.verify import main as verify_main
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.reference import random_feeds
from mrvl_convert.frontend.vocabulary import input_kinds

ROWS, T, C = 100, 8, 4


def _embedding() -> onnx.ModelProto:
    """ids [1, 8] -> Gather of a [100, 4] table -> MatMul [4, 4]; rows 0 and 1 are small, rows
    >= 2 hold 1e5, beyond fp16's 65504: converted to fp16, only ids 0 and 1 come out right."""
    table = np.full((ROWS, C), 1e5, np.float32)
    table[:2] = np.random.default_rng(0).uniform(-1, 1, (2, C))
    w = np.eye(C, dtype=np.float32) * 0.5
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["tok"], name="embed"),
         helper.make_node("MatMul", ["tok", "w"], ["y"], name="proj")],
        "embedding", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, T])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, C])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _attention(length_input: bool = False) -> onnx.ModelProto:
    """scores [1, 8, 8] plus (1 - mask) * -1e4, Softmax; with ``length_input`` also a length
    compared with a computed range (``Less(Range(8), length)``, a Where's condition): a length,
    not a mask."""
    one, big = (numpy_helper.from_array(np.array(v, np.float32), n)
                for n, v in (("one", 1.0), ("big", -1e4)))
    nodes = [helper.make_node("Unsqueeze", ["mask", "axis1"], ["m3"]),
             helper.make_node("Cast", ["m3"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "mf"], ["inv"]),
             helper.make_node("Mul", ["inv", "big"], ["bias"]),
             helper.make_node("Add", ["x", "bias"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, T]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, [1, T])]
    inits = [one, big, numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    out = "p"
    if length_input:
        inits += [numpy_helper.from_array(np.array(v, np.int64), n)
                  for n, v in (("zero", 0), ("t", T), ("step", 1))]
        nodes += [helper.make_node("Range", ["zero", "t", "step"], ["pos"]),
                  helper.make_node("Less", ["pos", "length"], ["valid"]),
                  helper.make_node("Where", ["valid", "p", "zerof"], ["q"])]
        inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zerof"))
        inputs.append(helper.make_tensor_value_info("length", TensorProto.INT64, []))
        out = "q"
    graph = helper.make_graph(nodes, "attention", inputs,
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, T, T])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_default_verify_draws_ids_over_the_vocabulary(tmp_path):
    model = _embedding()
    onnx.checker.check_model(model)
    path = tmp_path / "embedding.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "art"
    mrvl_convert.convert(str(path), str(out))
    assert input_kinds(model).vocabularies == {"ids": ROWS}
    feeds = random_feeds([TensorSpec("ids", (1, T), "int64")], 0, 8, input_kinds(model))
    drawn = np.concatenate([f["ids"].ravel() for f in feeds])
    assert drawn.max() >= 2 and drawn.max() < ROWS and drawn.min() >= 0
    result = mrvl_convert.compare(str(path), str(out))
    # rows >= 2 are 1e5 * 0.5 in fp32 and inf once rounded to fp16: the true verdict is FAIL
    # (on 0/1 ids, as drawn before, it PASSed)
    assert not result.passed, result.summary_line()
    assert "drawn as 0/1" not in result.summary_line()


def test_mrvl_verify_default_feeds_fail_the_embedding(tmp_path, capsys):
    path = tmp_path / "embedding.onnx"
    onnx.save(_embedding(), str(path))
    mrvl_convert.convert(str(path), str(tmp_path / "art"))
    assert verify_main([str(path), str(tmp_path / "art"), "--write-outputs",
                        str(tmp_path / "out.json")]) == 3
    assert "FAIL" in capsys.readouterr().out


def test_mask_drawn_as_a_padded_sequence_and_length_is_no_mask():
    kinds = input_kinds(_attention(length_input=True))
    assert kinds.masks == {"mask"} and not kinds.vocabularies
    specs = [TensorSpec("x", (1, T, T), "float32"), TensorSpec("mask", (2, T), "int64")]
    feeds = random_feeds(specs, 3, 8, kinds)
    assert all((f["mask"] == 1).all() for f in feeds[:1])  # the first sample: no padding
    for feed in feeds:
        rows = feed["mask"]
        assert set(np.unique(rows)) <= {0, 1}
        assert (rows[:, 0] == 1).all()  # a prefix of ones: at least one token
        assert (np.diff(rows, axis=1) <= 0).all()  # ones then zeros, never back to one
    assert any((f["mask"] == 0).any() for f in feeds[1:])  # padding is drawn too


def test_mask_of_where_condition():
    """DistilBERT's form: Where(mask == 0, -inf, scores)."""
    nodes = [helper.make_node("Equal", ["mask", "zero"], ["pad"]),
             helper.make_node("Unsqueeze", ["pad", "axis1"], ["pad3"]),
             helper.make_node("Where", ["pad3", "ninf", "x"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1)]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "ninf")]
    graph = helper.make_graph(nodes, "where_mask", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, T]),
        helper.make_tensor_value_info("mask", TensorProto.INT64, [1, T])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, T, T])], inits)
    assert input_kinds(helper.make_model(graph)).masks == {"mask"}


def test_verdict_names_an_input_drawn_as_zero_one(tmp_path):
    """The length of ``_attention`` is neither ids nor a mask: drawn 0/1, and said."""
    path = tmp_path / "attention.onnx"
    onnx.save(_attention(length_input=True), str(path))
    mrvl_convert.convert(str(path), str(tmp_path / "art"))
    result = mrvl_convert.compare(str(path), str(tmp_path / "art"))
    line = result.summary_line()
    assert "input length drawn as 0/1" in line and "mask" not in line.split("drawn")[0]
    assert "input length drawn as 0/1" in result.format_table()
    given = [{"x": np.zeros((1, T, T), np.float32), "mask": np.ones((1, T), np.int64),
              "length": np.array(T, np.int64)}]
    assert "drawn as 0/1" not in mrvl_convert.compare(str(path), str(tmp_path / "art"),
                                                      given).summary_line()


def test_keep_fp32_search_judges_on_ids_over_the_vocabulary(tmp_path):
    """``--keep-fp32``'s own verify (tune/keep_fp32.py) draws its random samples as verify
    does: on 0/1 ids the embedding's plain fp16 conversion PASSed there too."""
    from mrvl_convert.tune.keep_fp32 import convert_keep_fp32
    path = tmp_path / "embedding.onnx"
    onnx.save(_embedding(), str(path))
    result = convert_keep_fp32(str(path), None, [])
    assert result.before["passed"] is False, result.before
