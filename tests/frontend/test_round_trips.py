"""frontend/round_trips.py: a Transpose chain that puts every element back (ICLabelNet's
``[4, 1, 1, 100]`` -> Transpose -> Reshape -> Transpose) is gone, bit for bit on onnxruntime, so
the batch-4 region around it runs in batch-1 chunks and the model fits the device; a chain
that moves anything, or writes a model output, stays. An int8 model's chain through per-tensor
Q/DQ pairs keeps its pairs on the unmoved tensor."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import mrvl_convert
from support.models import Builder, canonicalized, run_ort

REVERSE = [3, 2, 1, 0]


def pair(b: Builder, y: str) -> str:
    """An int8 model's per-tensor QuantizeLinear -> DequantizeLinear after ``y``."""
    scale, zero = b.const(np.float32(0.02)), b.const(np.int8(0))
    return b.op("DequantizeLinear", [b.op("QuantizeLinear", [y, scale, zero]), scale, zero])


def tiling(batch: int = 4, perms=(REVERSE, REVERSE), output: bool = False,
           int8: bool = False) -> onnx.ModelProto:
    """ICLabel's PSD branch: 1-D Conv -> its move out and back -> a Concat -> a Conv."""
    b = Builder(seed=7, opset=13)
    step = (lambda y: pair(b, y)) if int8 else (lambda y: y)
    y = b.op("LeakyRelu", [b.conv(b.input("x", [batch, 1, 1, 16]), 1, 1, k=1)], alpha=0.2)
    t = step(b.op("Transpose", [y], perm=list(perms[0]), name="out_of_place"))
    moved = list(np.array([batch, 1, 1, 16])[list(perms[0])])
    t = step(b.op("Reshape", [t, b.const(np.array(moved, np.int64))], name="same_shape"))
    t = b.op("Transpose", [t], perm=list(perms[1]), name="back")
    if output:
        return b.model([t])
    y = b.op("Concat", [t, t, t, t], axis=1)
    return b.model([b.op("Relu", [b.conv(y, 4, 2, k=1)])])


def feed(model: onnx.ModelProto) -> dict:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("int8", [False, True])
def test_the_round_trip_is_gone_bit_for_bit(int8):
    model = tiling(int8=int8)
    canonical, proto = canonicalized(model)
    left = {n.name for n in canonical.graph.nodes}
    assert not left & {"out_of_place", "same_shape", "back"}
    assert "layout round trip" in canonical.removed["back"]
    # an int8 chain's two per-tensor pairs stay, on the unmoved tensor
    pairs = [n for n in canonical.graph.nodes if n.op == "QuantizeLinear"]
    assert len(pairs) == (2 if int8 else 0)
    assert all(n.outputs[0].shape == [4, 1, 1, 16] for n in pairs)
    want, got = run_ort(model, feed(model)), run_ort(proto, feed(model))
    assert want.keys() == got.keys()
    for name, value in want.items():
        assert np.array_equal(got[name], value), name


def test_a_chain_that_moves_elements_stays():
    # [3, 2, 1, 0] then [0, 1, 2, 3]: the data ends up reversed in its axes, not back
    model = tiling(batch=1, perms=(REVERSE, [0, 1, 2, 3]))
    canonical, _ = canonicalized(model)
    assert "out_of_place" in {n.name for n in canonical.graph.nodes}


def test_a_round_trip_writing_a_model_output_stays():
    canonical, _ = canonicalized(tiling(output=True))
    assert "back" in {n.name for n in canonical.graph.nodes}


def test_the_batch_4_region_runs_in_chunks_and_fits_the_device(tmp_path):
    # Before: the Transposes moved axis 0, the region read across samples, batch 4 > 1.
    result = mrvl_convert.convert(tiling(), tmp_path / "out")
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    (stage,) = result.manifest["stages"]
    assert stage["runs"] == 4
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
