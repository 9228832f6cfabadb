"""frontend/rank5_transposes.py: tf2onnx's rank-5 head moves (Unsqueeze -> Transpose ->
Reshape, g2p-id's bert_pron) as rank-4 Transposes, bit for bit on onnxruntime, and the
attention they cut whole on the accelerator."""
from __future__ import annotations

import numpy as np
import onnx

import mrvl_convert
from mrvl_convert.core.graph import static_shape
from mrvl_convert.quantize import Quantization
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import Builder, canonicalized, run_ort
from support.tf_bert import attention_only


def feed(model: onnx.ModelProto, seed: int = 0):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def assert_bit_equal(model: onnx.ModelProto) -> None:
    want, got = run_ort(model, feed(model)), run_ort(canonicalized(model)[1], feed(model))
    assert want.keys() == got.keys()
    for name, value in want.items():
        assert np.array_equal(got[name], value), name


def max_rank(model: onnx.ModelProto) -> int:
    graph = canonicalize(load_model(model)).graph
    return max(len(static_shape(t) or []) for n in graph.nodes for t in n.outputs)


def pair(b: Builder, y: str) -> str:
    """An int8 model's per-tensor QuantizeLinear -> DequantizeLinear after ``y``."""
    scale, zero = b.const(np.float32(0.02)), b.const(np.int8(3))
    return b.op("DequantizeLinear", [b.op("QuantizeLinear", [y, scale, zero]), scale, zero])


def head_move(shape, axes, perm, target, readers: int = 1,
              int8: bool = False) -> onnx.ModelProto:
    b = Builder(opset=13)
    step = (lambda y: pair(b, y)) if int8 else (lambda y: y)
    y = b.op("Relu", [b.input("x", shape)])
    y = step(b.op("Unsqueeze", [y, b.const(np.array(axes, np.int64))]))
    y = step(b.op("Transpose", [y], perm=perm))
    outs = [b.op("Relu", [b.op("Reshape", [y, b.const(np.array(target, np.int64))])])]
    if readers > 1:
        outs.append(b.op("Relu", [y]))
    return b.model(outs)


def test_the_three_head_moves_of_bert_pron_are_rank_4_bit_for_bit():
    model = attention_only()
    canonical = canonicalize(load_model(model))
    moved = [n for n in canonical.graph.nodes if n.op == "Transpose"
             and len(n.attrs["perm"]) == 4]
    assert sorted(n.attrs["perm"] for n in moved) == [[0, 2, 1, 3], [0, 2, 1, 3],
                                                      [0, 2, 1, 3], [0, 2, 3, 1]]
    assert all("rank-4 Transpose" in canonical.rewritten[n.name] for n in moved)
    assert max_rank(model) == 4
    assert_bit_equal(model)


def test_a_rank_6_transpose_with_two_unit_axes_is_rank_4():
    model = head_move([2, 3, 4, 5], [1, 3], [0, 4, 1, 5, 2, 3], [2, 5, 3, 4])
    assert max_rank(model) == 4
    assert_bit_equal(model)


def test_an_int8_head_move_through_its_qdq_pairs_is_rank_4_bit_for_bit():
    model = head_move([1, 6, 2, 4], [2], [0, 3, 1, 2, 4], [2, 6, 4], int8=True)
    assert max_rank(model) == 4
    assert_bit_equal(model)


def test_an_int8_chain_through_rank_5_and_its_qdq_pairs_is_one_reshape_bit_for_bit():
    # tf2onnx's Dense input: [1, T, C] -> Unsqueeze -> [1, T, 1, 1, C] -> pair -> [T, C]
    b = Builder(opset=13)
    y = b.op("Unsqueeze", [b.op("Relu", [b.input("x", [1, 6, 8])]),
                           b.const(np.array([2, 3], np.int64))])
    y = b.op("Reshape", [pair(b, y), b.const(np.array([6, 8], np.int64))])
    model = b.model([b.op("Relu", [y])])
    canonical = canonicalize(load_model(model))
    assert [n.op for n in canonical.graph.nodes] == ["Relu", "QuantizeLinear",
                                                     "DequantizeLinear", "Reshape", "Relu"]
    assert max_rank(model) == 3
    assert_bit_equal(model)


def test_an_int8_tf2onnx_attention_is_one_mrvl_subgraph_bit_equal_to_its_qdq_model(tmp_path):
    model = attention_only()
    rng = np.random.default_rng(1)
    calibration = {"x": rng.standard_normal((32, 6, 8)).astype(np.float32)}
    result = mrvl_convert.convert(model, tmp_path / "o", quantize=Quantization(calibration))
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    comparison = mrvl_convert.compare(qdq, result.out_dir, [feed(model, k) for k in range(3)])
    assert comparison.passed
    assert [row.max_abs for row in comparison.judged_rows] == [0.0]


def test_a_transpose_read_elsewhere_stays_rank_5():
    model = head_move([1, 3, 4, 5], [2], [0, 3, 1, 2, 4], [4, 3, 5], readers=2)
    assert max_rank(model) == 5
    assert_bit_equal(model)


def test_too_few_unit_axes_stay():
    # no unit axis to drop: the Transpose stays rank 5
    b = Builder(opset=13)
    y = b.op("Reshape", [b.input("x", [2, 3, 4, 5, 6]), b.const(np.array([2, 3, 4, 5, 6]))])
    y = b.op("Transpose", [y], perm=[0, 3, 1, 2, 4])
    model = b.model([b.op("Reshape", [y, b.const(np.array([10, 72]))])])
    assert max_rank(model) == 5
    assert_bit_equal(model)


def test_tf2onnx_attention_is_one_mrvl_subgraph_with_its_outputs(tmp_path):
    model = attention_only()
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    assert mrvl_convert.compare(model, result.out_dir, [feed(model, k) for k in range(2)]).passed
