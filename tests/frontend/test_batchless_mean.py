"""A batchless region that ends in a global mean (madmom's key CNN, issue 45: ``[H, W, C]`` after
the last Conv wrapper, BN scale and shift, Elu, ReduceMean over axes 0 and 1 to ``[C]``) computes
on ``[1, H, W, C]`` and ends as Transpose, ReduceMean over H and W, Squeeze(0)
(frontend/batchless_lift.py): within the stated bound of the original on onnxruntime, and the
model is one Mrvl subgraph where main left the tail on the CPU ("only 4-D tensors map to a
depthwise Conv2D; this one is 3-D", "Mul2D takes batch 1; this one has batch 12")."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from support.models import Builder, canonicalized, run_ort

U = 2.0 ** -24


def _key_net(opset: int, frames: int = 12, bins: int = 9, channels: int = 6):
    b = Builder(seed=7, opset=opset)
    axes = lambda *a: b.const(np.array(a, np.int64))  # noqa: E731
    y = b.op("Unsqueeze", [b.input("x", [frames, bins]), axes(2)])
    y = b.op("Unsqueeze", [y, axes(0)])
    y = b.op("Transpose", [y], perm=[0, 3, 1, 2])
    y = b.conv(y, 1, channels, k=3, pads=[1, 1, 1, 1])
    y = b.op("Squeeze", [b.op("Transpose", [y], perm=[0, 2, 3, 1]), axes(0)])
    y = b.op("Mul", [y, b.const(np.linspace(0.5, 1.5, channels, dtype=np.float32))])
    y = b.op("Add", [y, b.const(np.linspace(-0.3, 0.3, channels, dtype=np.float32))])
    y = b.op("Elu", [y], name="elu")
    if opset >= 18:
        y = b.op("ReduceMean", [y, axes(0, 1)], name="mean", keepdims=0)
    else:
        y = b.op("ReduceMean", [y], name="mean", keepdims=0, axes=[0, 1])
    return b.model([y])


def _feed():
    return {"x": np.random.default_rng(3).standard_normal((12, 9)).astype(np.float32)}


@pytest.mark.parametrize("opset", [13, 18])
def test_the_closing_mean_is_within_its_bound(opset):
    model = _key_net(opset)
    canonical, proto = canonicalized(model)
    added = sorted(n.op for n in canonical.graph.nodes if canonical.derived.get(n.name) == "mean")
    assert "Transpose" in added and "Squeeze" in added, added
    want = run_ort(model, _feed(), optimize=False)
    got = run_ort(proto, _feed(), optimize=False)
    (name, value), = want.items()
    assert got[name].shape == value.shape == (6,)
    probe = model.__class__()
    probe.CopyFrom(model)
    probe.graph.output[0].name = "elu_out"
    elu = run_ort(probe, _feed(), optimize=False)["elu_out"]
    mean_abs = np.abs(elu).mean(axis=(0, 1))
    assert np.all(np.abs(got[name].astype(np.float64) - value) <= 2 * (12 * 9 - 1) * U * mean_abs)


@pytest.mark.parametrize("opset", [13, 18])
def test_the_key_net_is_one_mrvl_subgraph_and_verifies(tmp_path, opset):
    model = _key_net(opset)
    result = mrvl_convert.convert(model, tmp_path / "art")
    summary = result.report["summary"]
    cpu = [(e["name"], e.get("reason")) for e in result.report["nodes"]
           if e["placement"] != "mrvl"]
    # the CPU stage lifts the batchless input to [1, T, F] only (batch_axis.batchless_lifts)
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"], summary["cpu_nodes"]) == \
        (1, 1, 0), cpu
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    assert mrvl_convert.compare(model, tmp_path / "art", samples=2).passed
