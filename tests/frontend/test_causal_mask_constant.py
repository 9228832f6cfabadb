"""A traced PyTorch decoder's causal mask: a constant of 0 and -inf added to the scores before
the Softmax (issue 45, g2p-id's tiny-pron, ``Add_889``). On integ11 the Add became a Sum2D
layer holding -inf in fp16 and the runtime refused the artifact (Fp16RangeError), so verify
could not run. ``frontend/mask_constants.py`` now clamps it to -32752 as it does T5's mask; a
constant an fp16 Sum2D layer cannot hold that is no mask is refused by the rule (the Add on
CPU) instead of written."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.frontend.mask_constants import clamp_mask_constants

T, D = 5, 8


def _decoder_attention(fill: float = -np.inf, softmax: bool = True) -> onnx.ModelProto:
    """x @ W @ x^T + causal mask -> Softmax -> @ x, the mask a [1, T, T] constant."""
    mask = np.triu(np.full((1, T, T), fill, np.float32), 1)
    w = np.random.default_rng(0).uniform(-.5, .5, (D, D)).astype(np.float32)
    last = "Softmax" if softmax else "Relu"
    nodes = [helper.make_node("MatMul", ["x", "w"], ["q"], "proj"),
             helper.make_node("Transpose", ["x"], ["xt"], "kt", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "xt"], ["s"], "scores"),
             helper.make_node("Add", ["s", "mask"], ["m"], "causal"),
             helper.make_node(last, ["m"], ["p"], "weights", **({"axis": -1} if softmax
                                                                  else {})),
             helper.make_node("MatMul", ["p", "x"], ["y"], "mix")]
    graph = helper.make_graph(
        nodes, "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, D])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(mask, "mask")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(count: int = 3):
    rng = np.random.default_rng(1)
    return [{"x": rng.uniform(-2, 2, (1, T, D)).astype(np.float32)} for _ in range(count)]


def test_a_causal_minus_inf_mask_converts_and_verifies(tmp_path):
    model = _decoder_attention()
    path = tmp_path / "decoder.onnx"
    onnx.save(model, str(path))
    result = mrvl_convert.convert(path, tmp_path / "art")
    entry = next(e for e in result.report["nodes"] if e["name"] == "causal")
    assert entry["placement"] == "mrvl" and "clamped to -32752" in entry["canonical"], entry
    assert mrvl_convert.compare(path, result.out_dir, _feeds()).passed


def test_the_clamped_mask_gives_the_same_weights_on_onnxruntime():
    """The rewrite alone, bit-equal on onnxruntime (every causal row keeps its diagonal)."""
    model = _decoder_attention()
    graph = gs.import_onnx(model)
    assert set(clamp_mask_constants(graph)) == {"causal"}
    clamped = gs.export_onnx(graph)
    assert float(numpy_helper.to_array(next(
        i for i in clamped.graph.initializer if i.name.startswith("mask"))).min()) == -32752.0
    before = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(clamped.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in _feeds():
        np.testing.assert_array_equal(after.run(None, feed)[0], before.run(None, feed)[0])


def test_an_out_of_range_constant_no_mask_is_refused_by_the_sum2d_rule(tmp_path):
    """Before a Relu, not a Softmax, -inf is no mask: not clamped, and the fp16 Sum2D layer
    cannot hold it, so the Add runs on CPU and the artifact verifies."""
    model = _decoder_attention(softmax=False)
    path = tmp_path / "no_mask.onnx"
    onnx.save(model, str(path))
    result = mrvl_convert.convert(path, tmp_path / "art")
    entry = next(e for e in result.report["nodes"] if e["name"] == "causal")
    assert entry["placement"] == "cpu", entry
    assert "canonical" not in entry, entry
    assert mrvl_convert.compare(path, result.out_dir, _feeds()).passed
