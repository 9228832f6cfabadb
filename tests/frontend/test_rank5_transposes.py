"""frontend/rank5_transposes.py: tf2onnx's rank-5 head moves (Unsqueeze -> Transpose ->
Reshape, g2p-id's bert_pron) as rank-4 Transposes, bit for bit on onnxruntime, and the
attention they cut whole on the accelerator."""
from __future__ import annotations

import numpy as np
import onnx

import mrvl_convert
from mrvl_convert.core.graph import static_shape
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


def head_move(shape, axes, perm, target, readers: int = 1) -> onnx.ModelProto:
    b = Builder(opset=13)
    y = b.op("Relu", [b.input("x", shape)])
    y = b.op("Unsqueeze", [y, b.const(np.array(axes, np.int64))])
    y = b.op("Transpose", [y], perm=perm)
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
