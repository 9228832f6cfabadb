"""Where-written attention masks (frontend/where_masks.py) run on onnxruntime before and after
the rewrite: bit-equal Softmax weights within the stated bound (scores within +-16300, a row
with at least one unmasked key), the stated difference on a row with every key masked, and
forms outside the rewrite's precondition left as they were."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.where_masks import rewrite_where_masks
from support.models import run_ort

ROWS, KEYS = 6, 10
FMIN = float(np.finfo(np.float32).min)


def _model(form: str, reader: str = "Softmax", const_cond: bool = False) -> onnx.ModelProto:
    """scores [ROWS, KEYS], keep (bool [1, KEYS]) -> masked Softmax weights, as ``form``."""
    nodes, inits = [], [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
                        helper.make_tensor("ninf", TensorProto.FLOAT, [], [float("-inf")]),
                        helper.make_tensor("fmin", TensorProto.FLOAT, [], [FMIN])]
    inputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [ROWS, KEYS])]
    if const_cond:
        inits.append(helper.make_tensor("keep", TensorProto.BOOL, [1, KEYS],
                                        [k % 3 != 1 for k in range(KEYS)]))
    else:
        inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, [1, KEYS]))
    nodes.append(helper.make_node("Not", ["keep"], ["drop"], name="not"))
    if form == "where_fmin":
        nodes.append(helper.make_node("Where", ["keep", "scores", "fmin"], ["masked"],
                                      name="mask"))
    else:
        nodes.append(helper.make_node("Where", ["drop", "ninf", "scores"], ["masked"],
                                      name="mask"))
    nodes.append(helper.make_node(reader, ["masked"], ["weights"], name="softmax", axis=-1)
                 if reader == "Softmax" else helper.make_node(reader, ["masked"], ["weights"],
                                                              name="softmax"))
    weights = "weights"
    if form == "isnan_inf":
        nodes += [helper.make_node("IsNaN", ["weights"], ["nan"], name="isnan"),
                  helper.make_node("Where", ["nan", "zero", "weights"], ["guarded"],
                                   name="guard")]
        weights = "guarded"
    # The weights read as attention reads them: a MatMul by the identity (exact).
    inits.append(helper.make_tensor("eye", TensorProto.FLOAT, [KEYS, KEYS],
                                    np.eye(KEYS, dtype=np.float32).reshape(-1)))
    nodes.append(helper.make_node("MatMul", [weights, "eye"], ["out"], name="context"))
    graph = helper.make_graph(nodes, "masked", inputs, [
        helper.make_tensor_value_info("out", TensorProto.FLOAT, [ROWS, KEYS])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rewritten(model):
    graph = gs.import_onnx(model)
    changed = rewrite_where_masks(graph, Rewrites())
    return gs.export_onnx(graph.cleanup().toposort()), changed


def _feeds(seed: int, spread: float = 8.0, keep_all_masked_row: bool = False):
    rng = np.random.default_rng(seed)
    keep = rng.random((1, KEYS)) < 0.6
    keep[0, 0] = not keep_all_masked_row
    if keep_all_masked_row:
        keep[:] = False
    scores = (rng.standard_normal((ROWS, KEYS)) * spread).astype(np.float32)
    return {"scores": scores, "keep": keep}


@pytest.mark.parametrize("form", ["isnan_inf", "where_inf", "where_fmin"])
@pytest.mark.parametrize("spread", [1.0, 100.0, 16000.0])
def test_the_rewrite_gives_the_same_weights_bit_for_bit_within_the_bound(form, spread):
    model = _model(form)
    proto, changed = _rewritten(model)
    assert "mask" in changed and "Where" in {n.op_type for n in proto.graph.node}
    assert "IsNaN" not in {n.op_type for n in proto.graph.node} or form != "isnan_inf"
    for seed in range(5):
        feeds = _feeds(seed, spread)
        feeds["scores"] = np.clip(feeds["scores"], -16300, 16300)
        want = next(iter(run_ort(model, feeds, optimize=False).values()))
        got = next(iter(run_ort(proto, feeds, optimize=False).values()))
        assert np.array_equal(got, want)


@pytest.mark.parametrize("form", ["isnan_inf", "where_fmin"])
def test_a_row_with_every_key_masked_differs_as_stated(form):
    model = _model(form)
    proto, _ = _rewritten(model)
    feeds = _feeds(1, keep_all_masked_row=True)
    want = next(iter(run_ort(model, feeds, optimize=False).values()))
    got = next(iter(run_ort(proto, feeds, optimize=False).values()))
    scores = feeds["scores"].astype(np.float32)
    shifted = scores + np.float32(-32752.0)
    expected = np.exp(shifted - shifted.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    # original: 0 (NaN guarded) or uniform (finfo.min); the rewrite: softmax(s - 32752)
    assert np.allclose(want, 0.0 if form == "isnan_inf" else 1.0 / KEYS)
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_a_constant_condition_folds_into_a_constant_mask():
    model = _model("where_fmin", const_cond=True)
    proto, changed = _rewritten(model)
    assert "mask" in changed and "Where" not in {n.op_type for n in proto.graph.node}
    feeds = {"scores": _feeds(2)["scores"]}
    want = run_ort(model, feeds, optimize=False)["out"]
    assert np.array_equal(run_ort(proto, feeds, optimize=False)["out"], want)


def test_a_where_read_by_something_else_than_a_softmax_stays():
    model = _model("where_inf", reader="Relu")
    proto, changed = _rewritten(model)
    assert not changed and [n.op_type for n in proto.graph.node].count("Where") == 1
