"""A Concat on H or W of 4-D tensors (tf2onnx's NHWC graphs: basic-pitch's CQT stacks and
harmonic stacking) runs on the accelerator as the channel Concat of 4-D views
(frontend/concat_views.py): one Mrvl subgraph where the Concat cut two, in fp16 and in int8,
where the views and the Concat are int8 layers and the artifact computes what the QDQ model
does."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import mrvl_convert
from support.int8 import converted_int8, output_scale, placements, run_both, steps
from support.models import Builder


def _joined_convs(axis: int) -> onnx.ModelProto:
    """Two Conv+Relu branches of one image joined on ``axis``, then a Conv: the Concat sits
    between compute-heavy layers, so a Concat on CPU cuts the model in two."""
    b = Builder(seed=4, opset=13)
    x = b.input("x", [1, 3, 8, 6])
    left = b.op("Relu", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])])
    right = b.op("Relu", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])])
    joined = b.op("Concat", [left, right], name="join", axis=axis)
    return b.model([b.conv(joined, 4, 2, pads=[1, 1, 1, 1])])


@pytest.mark.parametrize("axis", [2, 3, -1])
def test_an_h_or_w_concat_between_convs_is_one_mrvl_subgraph(tmp_path: Path, axis: int):
    model = _joined_convs(axis)
    result = mrvl_convert.convert(model, tmp_path / "art")
    join = placements(result)["join"]
    assert join["placement"] == "mrvl" and join["rule"] == "mrvl.concat", join
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    comparison = mrvl_convert.compare(model, tmp_path / "art", samples=2)
    assert comparison.passed, comparison.summary_line()


@pytest.mark.parametrize("axis", [2, 3])
def test_an_int8_h_or_w_concat_stays_int8(tmp_path: Path, axis: int):
    result, qdq = converted_int8(_joined_convs(axis), tmp_path / "art")
    join = placements(result)["join"]
    assert join["placement"] == "mrvl" and join["rule"] == "mrvl.qnn_concat", join
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    assert len(join["derived"]) == 6 + 2 * 6, join  # 2 views per input, 2 after: 6 pairs
    # the views and the Concat are int8 layers (a float view would be an fp16 reshape or
    # Concat; the output's own NHWC -> NCHW after its dequantize is a float layer anyway)
    fp16 = result.report["device"]["int8_flow"]["fp16_layers"]
    assert {"Concat", "reshape", "transpose"}.isdisjoint(fp16), fp16
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.uniform(-1, 1, (1, 3, 8, 6)).astype(np.float32)} for _ in range(8)]
    got, want = run_both(qdq, result.out_dir, feeds)
    diff = steps(got, want, output_scale(onnx.load(qdq)))
    assert np.mean(diff <= 1) >= 0.999 and diff.max() <= 2, np.bincount(diff.astype(int).ravel())
