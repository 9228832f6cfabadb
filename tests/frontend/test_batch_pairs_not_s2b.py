"""frontend/space_to_batch.py reads a SpaceToBatch through an int8 model's per-tensor Q/DQ
pairs, but a chain of pairs alone moves nothing: ICLabelNet's int8 psds branch, a batch-4
``[4, 1, 1, 100]`` input -> pair -> Conv (1x3), was taken for a 4x1 block of a ``[1, 1, 4,
100]`` image and rewritten as a dilated Conv on it. Exact, but the region then held batch-1 and
batch-4 tensors, could not run in batch-1 chunks, and the model did not fit the device. The
float twin has no chain there and is not rewritten; the int8 model now converts the same way."""
from __future__ import annotations

import numpy as np

import mrvl_convert
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import Builder


def pair(b: Builder, y: str) -> str:
    scale, zero = b.const(np.float32(0.05)), b.const(np.int8(0))
    return b.op("DequantizeLinear", [b.op("QuantizeLinear", [y, scale, zero]), scale, zero])


def int8_rows(batch: int = 4):
    """[batch, 1, 1, 16] -> pair -> Conv 1x3 (int8 weight) -> pair -> Relu -> pair -> Conv."""
    b = Builder(seed=5, opset=13)
    y = pair(b, b.input("x", [batch, 1, 1, 16]))
    for k, cin in enumerate((1, 4)):
        w = np.random.default_rng(k).integers(-100, 100, (4, cin, 1, 3)).astype(np.int8)
        weight = b.op("DequantizeLinear", [b.const(w), b.const(np.float32(0.01)),
                                           b.const(np.int8(0))])
        y = b.op("Conv", [y, weight], name=f"conv{k}", kernel_shape=[1, 3], pads=[0, 1, 0, 1])
        y = pair(b, b.op("Relu", [pair(b, y)]))
    return b.model([y])


def test_a_batch_read_through_pairs_only_is_no_space_to_batch():
    canonical = canonicalize(load_model(int8_rows()))
    convs = {n.name: n for n in canonical.graph.nodes if n.op == "Conv"}
    assert "space-to-batch" not in canonical.rewritten.get("conv0", "")
    assert convs["conv0"].inputs[0].shape == [4, 1, 1, 16]
    assert list(convs["conv0"].attrs.get("dilations", [1, 1])) == [1, 1]


def test_the_int8_batch_4_rows_run_in_chunks_and_fit(tmp_path):
    result = mrvl_convert.convert(int8_rows(), tmp_path / "out")
    mrvl = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    assert len(mrvl) == 1 and mrvl[0].get("runs") == 4
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
