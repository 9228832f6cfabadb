"""The token-tensor ops jax2tf and torch write (frontend/token_ops.py): each rewrite computes on
onnxruntime what the original computes (exactly, or within its stated bound), cases that are
not the form stay as they were, and each form converts to the layer set's kind."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from support.models import Builder, canonicalized, run_ort

B, T, C = 1, 6, 5


def _feed(shape, seed: int = 1, nonfinite: bool = True):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)
    if nonfinite:
        x.reshape(-1)[:5] = [0.0, -0.0, np.inf, -np.inf, np.nan]
    return {"x": x}


def _front(b: Builder, shape) -> str:
    """An FC in front (an identity MatMul), so a conversion has a compute-heavy layer."""
    return b.op("MatMul", [b.input("x", shape), b.const(np.eye(shape[-1], dtype=np.float32))],
                name="front")


# onnxruntime 1.18 (the lowest version allowed) fuses a rank-3 MatMul followed by a Transpose
# and a BatchNormalization into a Gemm that its own shape inference then refuses ("First input
# does not have rank 2"); later versions do not. Both models run without graph optimizations
# (the ONNX semantics as written, which is what the rewrite must keep).


def _rewritten(model, feeds):
    canonical, proto = canonicalized(model)
    return (canonical, run_ort(model, feeds, optimize=False),
            run_ort(proto, feeds, optimize=False))


def _converted(model, tmp_path):
    result = mrvl_convert.convert(model, tmp_path / "art")
    return {e["name"]: e for e in result.report["nodes"]}, result


def _expand_model(reader: str = "Sub", shape=(B, T, C)):
    b = Builder(opset=13)
    x = _front(b, [B, T, C])
    mean = b.op("ReduceMean", [x], name="mean", axes=[-1], keepdims=1)
    wide = b.op("Expand", [mean, b.const(np.array(shape, np.int64))], name="expand")
    if reader == "Sub":
        return b.model([b.op("Sub", [x, wide], name="centre")])
    return b.model([b.op("Softmax", [wide], name="soft", axis=-1)])


def test_expand_read_by_a_broadcasting_op_is_folded_into_it_exactly(tmp_path):
    model = _expand_model()
    canonical, want, got = _rewritten(model, _feed([B, T, C]))
    assert "expand" in canonical.merged and canonical.merged["expand"] == "centre"
    assert "Expand" not in {n.op for n in canonical.graph.nodes}
    for name, value in want.items():
        assert np.array_equal(got[name], value, equal_nan=True)
    entries, result = _converted(model, tmp_path)
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert entries["expand"]["placement"] == "mrvl"


def test_expand_read_by_another_op_stays():
    canonical, _, _ = _rewritten(_expand_model("Softmax"), _feed([B, T, C]))
    assert "Expand" in {n.op for n in canonical.graph.nodes}


def _pool_model(op: str, keepdims: int = 1, axes=(-1,), opset: int = 13):
    b = Builder(opset=opset)
    x = b.op("Transpose", [_front(b, [B, T, C])], name="to_time", perm=[0, 2, 1])
    if op == "GlobalMaxPool":
        y = b.op("GlobalMaxPool", [x], name="pool")
    else:
        y = b.op("ReduceSum", [x, b.const(np.array(axes, np.int64))], name="pool",
                 keepdims=keepdims)
    return b.model([y])


@pytest.mark.parametrize("opset", [13, 18])
def test_global_max_pool_of_3d_is_a_reduce_max_over_the_last_axis_exactly(tmp_path, opset):
    """Exact without NaN (with one, onnxruntime's GlobalMaxPool may skip it: the docstring)."""
    model = _pool_model("GlobalMaxPool", opset=opset)
    feeds = _feed([B, T, C], nonfinite=False)
    feeds["x"].reshape(-1)[:2] = [0.0, -0.0]
    canonical, want, got = _rewritten(model, feeds)
    # frontend/rank_lift.py lifts it first: a GlobalMaxPool of the 4-D view [N, C, 1, L].
    assert "4-D view" in canonical.rewritten["pool"]
    for name, value in want.items():
        assert got[name].shape == value.shape == (B, C, 1)
        assert np.array_equal(got[name], value, equal_nan=True)
    entries, result = _converted(model, tmp_path)
    assert entries["pool"]["rule"] == "mrvl.globalmaxpool2d_nhwc2nhwc"
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]


@pytest.mark.parametrize("keepdims", [1, 0])
def test_reduce_sum_over_the_last_axis_is_a_matmul_by_ones_within_its_bound(tmp_path, keepdims):
    """Only the order of the float32 additions may differ: at most 2 (L - 1) 2**-24 sum |x|."""
    model = _pool_model("ReduceSum", keepdims=keepdims)
    feeds = _feed([B, T, C], nonfinite=False)
    canonical, want, got = _rewritten(model, feeds)
    assert canonical.rewritten["pool"].startswith(f"ReduceSum over the last axis ({T})")
    x = feeds["x"].transpose(0, 2, 1)
    bound = 2 * (T - 1) * 2.0 ** -24 * np.abs(x).sum(axis=-1, keepdims=bool(keepdims))
    for name, value in want.items():
        assert got[name].shape == value.shape
        assert np.all(np.abs(got[name] - value) <= bound)
    entries, result = _converted(model, tmp_path)
    assert entries["pool"]["placement"] == "mrvl" and "fc" in entries["pool"]["rule"]


def test_reduce_sum_over_the_batch_axis_stays():
    canonical, _, _ = _rewritten(_pool_model("ReduceSum", axes=(0,)), _feed([B, T, C]))
    assert "pool" not in canonical.rewritten
    assert "ReduceSum" in {n.op for n in canonical.graph.nodes}


def _bn_model(opset: int = 13):
    b = Builder(opset=opset)
    x = b.op("Transpose", [_front(b, [B, T, C])], name="to_channels", perm=[0, 2, 1])
    y = b.op("Transpose", [b.bn(x, C)], name="to_tokens", perm=[0, 2, 1])
    return b.model([y])


@pytest.mark.parametrize("opset", [11, 13])
def test_batch_norm_of_3d_computes_on_its_4d_view_exactly(tmp_path, opset):
    model = _bn_model(opset)
    canonical, want, got = _rewritten(model, _feed([B, T, C]))
    [bn] = [n for n in canonical.graph.nodes if n.op == "BatchNormalization"]
    # frontend/rank_lift.py lifts it first, to the view [N, C, 1, L] (NHWC: the tokens too).
    assert bn.inputs[0].shape == [B, C, 1, T] and bn.name in canonical.rewritten
    for name, value in want.items():
        assert np.array_equal(got[name], value, equal_nan=True)
    entries, result = _converted(model, tmp_path)
    assert entries[bn.name]["rule"] == "mrvl.channel_affine"
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
