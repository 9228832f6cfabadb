"""canonical_forms.py: Neg (as tf2onnx writes it) becomes Mul by -1, bit for bit but a NaN's
sign."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from support.models import canonicalized, run_ort

SHAPE = [1, 4, 5, 5]


def _neg_model(between_convs: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.2).astype(np.float32),
                                     f"w{k}") for k in range(2)]
    if between_convs:
        nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1] * 4, name="conv0"),
                 helper.make_node("Neg", ["c0"], ["n0"], name="neg"),
                 helper.make_node("Conv", ["n0", "w1"], ["y"], pads=[1] * 4, name="conv1")]
    else:
        nodes, inits = [helper.make_node("Neg", ["x"], ["y"], name="neg")], []
    graph = helper.make_graph(nodes, "neg", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                           SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_neg_becomes_mul_by_minus_one_bit_for_bit_but_a_nans_sign():
    model = _neg_model(between_convs=False)
    canonical, rewritten = canonicalized(model)
    assert [n.op for n in canonical.graph.nodes] == ["Mul"]
    assert "Neg became Mul by -1" in canonical.rewritten["neg"]
    x = (np.random.default_rng(1).standard_normal(SHAPE) * 100).astype(np.float32)
    x.reshape(-1)[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45]
    want, got = run_ort(model, {"x": x})["y"], run_ort(rewritten, {"x": x})["y"]
    number = ~np.isnan(want)
    assert got[number].tobytes() == want[number].tobytes()  # -0.0, infinities too
    assert np.array_equal(np.isnan(got), np.isnan(want))  # a NaN stays a NaN (sign aside)


def test_a_neg_between_convs_no_longer_cuts_the_model(tmp_path):
    """On main: 'no rule handles op type Neg', 2 Mrvl subgraphs and a CPU one."""
    result = mrvl_convert.convert(_neg_model(between_convs=True), tmp_path / "a")
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
