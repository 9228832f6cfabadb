"""A global max pool as keras2onnx and torch write it (frontend/global_max.py): bit-equal on
onnxruntime before and after, and a CNN ending in it is one Mrvl subgraph (before: "the input
is 4-D, not 3-D", DNSMOS's head on the CPU)."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.models import Builder, canonicalized, run_ort


def _model(form: str, keepdims: int = 0):
    b = Builder(opset=13)
    y = b.op("Relu", [b.conv(b.input("x", [1, 3, 8, 10]), 3, 6, pads=[1, 1, 1, 1])])
    if form == "keras":
        y = b.op("Transpose", [y], name="to_nhwc", perm=[0, 2, 3, 1])
    axes = [1, 2] if form == "keras" else [2, 3]
    pooled = b.op("ReduceMax", [y], name="pool", axes=axes, keepdims=keepdims)
    if not keepdims:
        pooled = b.op("MatMul", [pooled, b.weight(6, 4)], name="head")
    return b.model([pooled])


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 3, 8, 10)).astype(np.float32)


@pytest.mark.parametrize("form,keepdims", [("keras", 0), ("torch", 0), ("torch", 1)])
def test_a_global_reduce_max_is_a_global_max_pool_bit_for_bit(form, keepdims):
    model = _model(form, keepdims)
    canonical, proto = canonicalized(model)
    assert next(n for n in canonical.graph.nodes if n.name == "pool").op == "GlobalMaxPool"
    assert "Transpose" not in {n.op for n in canonical.graph.nodes}
    [want] = run_ort(model, {"x": _x()}, optimize=False).values()
    [got] = run_ort(proto, {"x": _x()}, optimize=False).values()
    assert got.shape == want.shape and np.array_equal(got, want)


def test_the_nhwc_form_keeping_its_axes_is_left_alone():
    canonical, _ = canonicalized(_model("keras", keepdims=1))
    assert next(n for n in canonical.graph.nodes if n.name == "pool").op == "ReduceMax"


def test_a_cnn_ending_in_a_keras_global_max_pool_is_one_mrvl_subgraph(tmp_path):
    model = _model("keras")
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert compare(model, tmp_path / "art", [{"x": _x()}]).passed
