"""Attention as other exporters write it (issue 45 finding 6): a MiniLM-like block whose masks
are ``Where(mask, -inf, scores)`` + ``Where(IsNaN(softmax), 0, softmax)`` (or torch.where with
``finfo.min``) and whose heads ride in the batch axis (``[12, T, d]`` BatchMatMuls of a batch-1
input) converts to ONE Mrvl subgraph (the mask's Cast/Not before it on the CPU) and verify
passes. Before: a CPU Where/IsNaN in the middle of the block and "batch 12 is larger than the
accelerator's maximum of 8" on every head-folded layer.

Also: a recurrent cell between a Conv stack and an FC head stays on the CPU with its reason,
and the rest of the model is whole (two Mrvl subgraphs, around it)."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.models import Builder
from support.strategies.attn import attn_from_spec

pytestmark = pytest.mark.system


@pytest.mark.parametrize("mask", ["isnan_inf", "where_inf", "where_fmin", "additive_where"])
def test_minilm_block_with_where_masks_and_heads_in_the_batch_axis_is_one_mrvl_subgraph(
        tmp_path, mask):
    case = attn_from_spec({"seed": 0, "opset": 17, "tokens": 16, "heads": 12, "dim": 8,
                           "mask": mask, "heads_in_batch": True})
    result = mrvl_convert.convert(case.model, tmp_path / "art")
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds.count("mrvl") == 1, kinds
    scores = result.placement("scores")
    assert scores["placement"] == "mrvl", scores
    if mask == "isnan_inf":  # the guard is the Softmax's now, and the report says so
        assert result.placement("nan_zero")["merged_into"] == "softmax"
    assert compare(case.model, tmp_path / "art", [case.feeds]).passed


def test_a_model_whose_own_batch_is_over_the_limit_runs_in_chunks(tmp_path):
    # The model's own batch 12 (not heads folded into axis 0) is above the device's: the
    # per-sample FC runs as 12 runs of the profile's 1 (rules/batch_axis.py batch_runs).
    b = Builder()
    x = b.input("x", [12, 16, 8])
    y = b.op("MatMul", [x, b.weight(8, 8)], name="fc")
    result = mrvl_convert.convert(b.model([b.op("Relu", [y], name="act")]), tmp_path / "art")
    assert result.placement("fc")["placement"] == "mrvl"
    assert [s.get("runs") for s in result.manifest["stages"]] == [12]


def _conv_lstm_head(**cell_attrs):
    """Conv stack -> [T, 1, C] sequence -> LSTM -> FC head (a CRNN's shape)."""
    b, hidden = Builder(opset=13), 6
    x = b.input("x", [1, 3, 8, 16])
    y = b.op("Relu", [b.conv(x, 3, 8, pads=[1, 1, 1, 1])], name="c1")
    y = b.op("Relu", [b.conv(y, 8, 8, pads=[1, 1, 1, 1])], name="c2")
    y = b.op("ReduceMean", [y], name="pool_h", axes=[2], keepdims=0)
    seq = b.op("Transpose", [y], name="to_seq", perm=[2, 0, 1])
    out = b.op("LSTM", [seq, b.weight(1, 4 * hidden, 8, scale=0.3),
                        b.weight(1, 4 * hidden, hidden, scale=0.3)], name="lstm",
               hidden_size=hidden, **cell_attrs)
    z = b.op("Reshape", [out, b.const(np.array([1, 16, hidden], np.int64))], name="flat")
    return b.model([b.op("MatMul", [z, b.weight(hidden, 5)], name="head")])


def test_a_recurrent_cell_unrolled_makes_the_model_whole(tmp_path):
    """frontend/recurrent_unroll.py: the LSTM over its 16 steps is FC and gate layers."""
    model = _conv_lstm_head()
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert result.placement("lstm")["placement"] == "mrvl"
    assert compare(model, tmp_path / "art").passed


def test_a_recurrent_cell_stays_on_cpu_with_its_reason_and_the_rest_is_whole(tmp_path):
    model = _conv_lstm_head(clip=10.0)  # a clipped cell is not unrolled
    result = mrvl_convert.convert(model, tmp_path / "art")
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds.count("mrvl") <= 2 and kinds.count("cpu") == 1, kinds
    lstm = result.placement("lstm")
    assert lstm["placement"] == "cpu" and "recurrent cell" in lstm["reason"]
    assert "clip is set" in lstm["canonical"]
    for name in ("c1", "c2", "head"):
        assert result.placement(name)["placement"] == "mrvl"
    assert compare(model, tmp_path / "art").passed
