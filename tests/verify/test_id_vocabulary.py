"""The vocabulary ids are drawn below is the table the ids input indexes directly, not the
smallest table the model gathers from (T5's 32-entry relative-attention-bias table, indexed by
computed positions, made the corpus draw every id below 32)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.vocabulary import id_vocabularies, vocabulary
from support.benchmarks import bench_module

feeds = bench_module("real_corpus_feeds")

VOCAB, BUCKETS, T, C = 1000, 8, 6, 4


def _two_tables(quantized: bool = False) -> onnx.ModelProto:
    """ids -> Cast -> Reshape -> Gather(embedding [1000, 4]) plus a bias from a [8, 4] table
    read by computed indices (ids mod 8), T5-like; the embedding optionally uint8 (the Gather
    reads the quantized table, a DequantizeLinear after it, as quantize_dynamic writes it)."""
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((VOCAB, C)).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal((BUCKETS, C)).astype(np.float32),
                                     "bias_table"),
             numpy_helper.from_array(np.array([1, T], np.int64), "shape"),
             numpy_helper.from_array(np.array(BUCKETS, np.int64), "buckets")]
    nodes = [helper.make_node("Cast", ["ids"], ["ids64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["ids64", "shape"], ["ids_r"]),
             helper.make_node("Mod", ["ids_r", "buckets"], ["bucket"]),
             helper.make_node("Gather", ["bias_table", "bucket"], ["bias"])]
    if quantized:
        inits += [numpy_helper.from_array((emb * 20 + 128).clip(0, 255).astype(np.uint8), "emb_q"),
                  numpy_helper.from_array(np.array(0.05, np.float32), "s"),
                  numpy_helper.from_array(np.array(128, np.uint8), "zp")]
        nodes += [helper.make_node("Gather", ["emb_q", "ids_r"], ["tok_q"]),
                  helper.make_node("DequantizeLinear", ["tok_q", "s", "zp"], ["tok"])]
    else:
        inits.append(numpy_helper.from_array(emb, "emb"))
        nodes.append(helper.make_node("Gather", ["emb", "ids_r"], ["tok"]))
    nodes.append(helper.make_node("Add", ["tok", "bias"], ["y"]))
    graph = helper.make_graph(
        nodes, "two_tables",
        [helper.make_tensor_value_info("ids", TensorProto.INT32, [1, T])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, C])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_ids_drawn_below_the_embedding_not_the_small_bias_table():
    model = _two_tables()
    onnx.checker.check_model(model)
    assert id_vocabularies(model) == {"ids": VOCAB}
    assert feeds.vocabulary(model) == VOCAB  # was 8: the bias table read by computed indices
    rng = np.random.default_rng(1)
    specs = {"ids": ([1, T], TensorProto.INT32)}
    drawn = np.concatenate([feeds.make_feed("text-ids", specs, rng, None,
                                            feeds.vocabulary(model), {})["ids"].ravel()
                            for _ in range(20)])
    assert drawn.max() >= BUCKETS and drawn.max() < VOCAB
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"ids": drawn[:T].reshape(1, T).astype(np.int32)})[0].shape == \
        (1, T, C)


def test_a_quantized_embedding_counts_and_a_model_without_ids_has_none():
    model = _two_tables(quantized=True)
    onnx.checker.check_model(model)
    assert id_vocabularies(model) == {"ids": VOCAB}
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "no_ids",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    assert vocabulary(helper.make_model(graph)) is None


def test_each_input_its_own_table_through_float_casts_and_constant_picks():
    """deepcut's two float inputs Cast to ids index tables of 178 and 12 rows (drawn below 12
    both, before); attacut's [1, 2, T] input holds two id rows, picked by constant Gathers."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((178, C)).astype(np.float32), "chars"),
             numpy_helper.from_array(rng.standard_normal((12, C)).astype(np.float32), "kinds"),
             numpy_helper.from_array(rng.standard_normal((139, C)).astype(np.float32), "ch"),
             numpy_helper.from_array(rng.standard_normal((6227, C)).astype(np.float32), "sy"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one")]
    nodes = [helper.make_node("Cast", ["a"], ["a_i"], to=TensorProto.INT32),
             helper.make_node("Cast", ["b"], ["b_i"], to=TensorProto.INT32),
             helper.make_node("Gather", ["chars", "a_i"], ["ea"]),
             helper.make_node("Gather", ["kinds", "b_i"], ["eb"]),
             helper.make_node("Gather", ["pair", "zero"], ["row0"], axis=1),
             helper.make_node("Gather", ["pair", "one"], ["row1"], axis=1),
             helper.make_node("Gather", ["ch", "row0"], ["e0"]),
             helper.make_node("Gather", ["sy", "row1"], ["e1"]),
             helper.make_node("Sum", ["ea", "eb", "e0", "e1"], ["y"])]
    graph = helper.make_graph(
        nodes, "per_input",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, T]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, T]),
         helper.make_tensor_value_info("pair", TensorProto.INT64, [1, 2, T])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, C])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    vocabs = id_vocabularies(model)
    assert vocabs == {"a": 178, "b": 12, "pair": 139}
    specs = {"a": ([1, T], TensorProto.FLOAT), "b": ([1, T], TensorProto.FLOAT),
             "pair": ([1, 2, T], TensorProto.INT64)}
    drawn = [feeds.make_feed("text-ids", specs, np.random.default_rng(k), None,
                             feeds.vocabulary(model), {}, vocabs) for k in range(20)]
    assert max(f["a"].max() for f in drawn) >= 12 > max(f["b"].max() for f in drawn)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.isfinite(session.run(None, drawn[0])[0]).all()
