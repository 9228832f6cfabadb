"""frontend/outer_sums.py: an Add broadcasting each operand along the other's unit axis (the
additive attention after text2tashkeel's bilstm: ``[1, T, 1, C] + [1, 1, T, C]``) with its
one-channel operand widened by a 1x1 Conv of ones: bit-equal on onnxruntime, and the Add no
longer cuts the model."""
from __future__ import annotations

from typing import Dict

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.shape_inference import infer_shapes

import mrvl_convert
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.outer_sums import widen_outer_sums
from support.models import run_ort
from support.recurrent import unrolled

STEPS, WIDTH, HIDDEN, DIM, CLASSES = 6, 5, 4, 8, 3


def _inits(seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"W": rng.standard_normal((2, 4 * HIDDEN, WIDTH)) * 0.4,
            "R": rng.standard_normal((2, 4 * HIDDEN, HIDDEN)) * 0.4,
            "B": rng.standard_normal((2, 8 * HIDDEN)) * 0.1,
            "wa": rng.standard_normal((2 * HIDDEN, DIM)) * 0.4,
            "ua": rng.standard_normal((2 * HIDDEN, DIM)) * 0.4,
            "va": rng.standard_normal((DIM, 1)) * 0.4,
            "wc": rng.standard_normal((2 * HIDDEN, CLASSES)) * 0.4,
            "bc": rng.standard_normal(CLASSES) * 0.1}


def bilstm_attention(seed: int = 0, ua_first: bool = False) -> onnx.ModelProto:
    """x [1, T, F] -> Transpose [T, 1, F] -> bidirectional LSTM -> [1, T, 2h] (enc) ->
    scores tanh(W enc as [1, T, 1, D] + U enc as [1, 1, T, D]) v -> Softmax over the last
    axis -> MatMul with enc -> classifier: text2tashkeel's bilstm, small. ``ua_first``: the
    Add reads the [1, 1, T, D] operand first."""
    consts = {"to_seq_shape": np.array([STEPS, 1, 2 * HIDDEN]), "ax1": np.array([1]),
              "ax2": np.array([2]), "ax3": np.array([3])}
    add_in = ["uq", "wq"] if ua_first else ["wq", "uq"]
    nodes = [
        helper.make_node("Transpose", ["x"], ["seq"], name="to_seq", perm=[1, 0, 2]),
        helper.make_node("LSTM", ["seq", "W", "R", "B"], ["Y"], name="lstm",
                         hidden_size=HIDDEN, direction="bidirectional"),
        helper.make_node("Transpose", ["Y"], ["Yt"], name="dirs_last", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["Yt", "to_seq_shape"], ["joined"], name="join_dirs"),
        helper.make_node("Transpose", ["joined"], ["enc"], name="batch_first", perm=[1, 0, 2]),
        helper.make_node("MatMul", ["enc", "wa"], ["w"], name="att_w"),
        helper.make_node("MatMul", ["enc", "ua"], ["u"], name="att_u"),
        helper.make_node("Unsqueeze", ["w", "ax2"], ["wq"], name="w_rows"),
        helper.make_node("Unsqueeze", ["u", "ax1"], ["uq"], name="u_cols"),
        helper.make_node("Add", add_in, ["pairs"], name="outer_sum"),
        helper.make_node("Tanh", ["pairs"], ["t"], name="tanh"),
        helper.make_node("MatMul", ["t", "va"], ["s4"], name="att_v"),
        helper.make_node("Squeeze", ["s4", "ax3"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "enc"], ["ctx"], name="context"),
        helper.make_node("MatMul", ["ctx", "wc"], ["m"], name="classifier"),
        helper.make_node("Add", ["m", "bc"], ["logits"], name="classifier_bias")]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in _inits(seed).items()]
    inits += [numpy_helper.from_array(v.astype(np.int64), k) for k, v in consts.items()]
    graph = helper.make_graph(
        nodes, "bilstm_attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, STEPS, WIDTH])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, STEPS, CLASSES])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def _feed(seed: int) -> Dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((1, STEPS, WIDTH)
                                                             ).astype(np.float32)}


def _widened(model: onnx.ModelProto):
    """(the model after widen_outer_sums alone, its graph, the Rewrites)."""
    graph, done = gs.import_onnx(model), Rewrites()
    changed = widen_outer_sums(graph, done)
    graph.cleanup().toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    return changed, proto, graph, done


@pytest.mark.parametrize("ua_first", [False, True])
def test_the_outer_sum_after_an_unrolled_bilstm_is_widened_bit_equal(ua_first):
    before, _, _ = unrolled(infer_shapes(bilstm_attention(ua_first=ua_first)))
    changed, after, graph, done = _widened(before)
    assert changed and "outer sum" in done.rewritten["outer_sum"]
    add = next(n for n in graph.nodes if n.name == "outer_sum")
    widen = add.inputs[0].inputs[0]
    assert widen.op == "Conv" and add.inputs[0].shape == [1, STEPS, STEPS, DIM]
    assert add.inputs[1].name == "wq"
    for seed in range(3):
        want, got = run_ort(before, _feed(seed)), run_ort(after, _feed(seed))
        assert np.array_equal(want["logits"], got["logits"])


@pytest.mark.parametrize("a_shape,b_shape", [
    ([1, 4, 3, 5], [1, 1, 3, 5]),   # an operand of the output's shape: Sum2D takes it as it is
    ([1, 4, 3, 1], [1, 4, 1, 5]),   # an outer sum whose unit axes are not the channels
])
def test_other_broadcasting_adds_stay(a_shape, b_shape):
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 5])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    changed, _, graph, _ = _widened(model)
    assert not changed and [n.op for n in graph.nodes] == ["Add"]


def test_a_bilstm_with_additive_attention_is_one_mrvl_subgraph(tmp_path):
    """On integ9 the Add was cut (Sum2D: neither activation has the output's shape): 2 Mrvl
    subgraphs and the Add on CPU."""
    model = bilstm_attention()
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    feeds = [_feed(k) for k in range(2)]
    assert mrvl_convert.compare(model, result.out_dir, feeds).passed
