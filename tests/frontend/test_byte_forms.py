"""Byte and token models' ReduceSum and Expand forms beyond the ones jax2tf writes
(frontend/token_ops.py, issue 45 finding 6): ReduceSum over any one non-batch axis of a rank
2-4 tensor, either keepdims, is a MatMul by ones (Transposes around it for an inner axis) within
the stated bound ``2 (L - 1) 2**-24 sum |x|``; a byte classifier pooling its masked tokens with
ReduceSum over the token axis is one Mrvl subgraph (it was two: the ReduceSum on the CPU)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.models import Builder, canonicalized, run_ort


def _sum_model(shape, axis: int, keepdims: int):
    b = Builder(opset=13)
    x = b.op("MatMul", [b.input("x", shape), b.const(np.eye(shape[-1], dtype=np.float32))],
             name="front")
    return b.model([b.op("ReduceSum", [x, b.const(np.array([axis], np.int64))], name="pool",
                         keepdims=keepdims)])


@pytest.mark.parametrize("shape,axis", [([2, 7], 1), ([1, 6, 5], 1), ([1, 6, 5], -1),
                                        ([1, 3, 4, 5], 1), ([1, 3, 4, 5], 2),
                                        ([1, 3, 4, 5], 3)])
@pytest.mark.parametrize("keepdims", [1, 0])
def test_reduce_sum_over_one_axis_is_a_matmul_by_ones_within_its_bound(shape, axis, keepdims):
    model = _sum_model(shape, axis, keepdims)
    rng = np.random.default_rng(len(shape) * 10 + axis)
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)
    canonical, proto = canonicalized(model)
    assert "ReduceSum" not in {n.op for n in canonical.graph.nodes}
    assert "MatMul by ones" in canonical.rewritten["pool"]
    want = run_ort(model, {"x": x}, optimize=False)
    got = run_ort(proto, {"x": x}, optimize=False)
    length = shape[axis]
    bound = 2 * (length - 1) * 2.0 ** -24 * np.abs(x.astype(np.float64)).sum(
        axis=axis, keepdims=bool(keepdims))
    for name, value in want.items():
        assert got[name].shape == value.shape
        assert np.all(np.abs(got[name].astype(np.float64) - value) <= bound)


@pytest.mark.parametrize("axes", [[0], [1, 2]])
def test_reduce_sum_over_the_batch_or_several_axes_stays(axes):
    b = Builder(opset=13)
    x = b.op("Relu", [b.input("x", [1, 6, 5])], name="front")
    model = b.model([b.op("ReduceSum", [x, b.const(np.array(axes, np.int64))], name="pool")])
    canonical, _ = canonicalized(model)
    assert "pool" not in canonical.rewritten


def _byte_classifier(length: int = 12, channels: int = 16, vocab: int = 40):
    """Byte ids -> embedding (CPU) -> FC -> mask of non-pad bytes Expand-ed to the tokens ->
    Mul -> ReduceSum over the token axis (keepdims 0) -> FC head."""
    b = Builder(opset=13)
    ids = b.input("ids", [1, length], TensorProto.INT64)
    emb = b.op("Gather", [b.weight(vocab, channels, scale=1.0), ids], name="embed", axis=0)
    h = b.op("Relu", [b.op("MatMul", [emb, b.weight(channels, channels)], name="fc1")],
             name="act1")
    keep = b.op("Cast", [b.op("Greater", [ids, b.const(np.array(0, np.int64))],
                              name="nonpad")], name="keepf", to=1)
    keep = b.op("Unsqueeze", [keep, b.const(np.array([2], np.int64))], name="keep3")
    wide = b.op("Expand", [keep, b.const(np.array([1, length, channels], np.int64))],
                name="expand")
    pooled = b.op("ReduceSum", [b.op("Mul", [h, wide], name="masked"),
                                b.const(np.array([1], np.int64))], name="pool", keepdims=0)
    return b.model([b.op("Gemm", [pooled, b.weight(4, channels)], name="head", transB=1)])


def test_a_byte_classifier_pooling_over_tokens_is_one_mrvl_subgraph(tmp_path):
    model = _byte_classifier()
    result = mrvl_convert.convert(model, tmp_path / "art")
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds.count("mrvl") == 1, kinds
    assert result.placement("pool")["placement"] == "mrvl"
    rng = np.random.default_rng(0)
    feeds = [{"ids": rng.integers(0, 40, (1, 12)).astype(np.int64)} for _ in range(3)]
    assert compare(model, tmp_path / "art", feeds).passed
