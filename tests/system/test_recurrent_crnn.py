"""A CRNN (Conv front end -> bidirectional LSTM/GRU/RNN -> FC head, as OCR and audio models
are) converts to ONE Mrvl subgraph: the cell unrolled (``frontend/recurrent_unroll.py``) maps
as FC, StridedSlice, Sigmoid, Tanh, Mul2D, Sum2D and Concat layers, and HybridSession's output
is within verify's fp16 tolerance of onnxruntime fp32. On main the cell stayed on the CPU and
the model was 2 Mrvl subgraphs around it. A cell that is not unrolled says why in report.json.
The int8 recipe quantizes the convolution and the head; the unrolled steps run as fp16 layers,
and verify's int8 reference rounds each step as they do."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.quantize.recipe import Quantization
from support import recurrent

pytestmark = pytest.mark.system


@pytest.mark.parametrize("cell", ["LSTM", "GRU", "RNN"])
def test_a_crnn_is_one_mrvl_subgraph_within_the_fp16_tolerance(tmp_path, cell):
    model = recurrent.crnn(cell=cell)
    result = mrvl_convert.convert(model, tmp_path / "art")
    # The head computes on [1, T, 1, classes] (step_heads.py); one CPU node, a Squeeze(0),
    # lays that out as the model's time-major logits [T, 1, classes].
    stages = result.manifest["stages"]
    assert [s["kind"] for s in stages] == ["mrvl", "cpu"] and stages[1]["nodes"] == 1
    assert result.report["device"]["fits"] is True
    assert result.summary["mrvl_mac_share"] == 1.0
    entry = result.placement("rnn")
    assert entry["placement"] == "mrvl" and "unrolled over its T=8 steps" in entry["canonical"]
    assert {d["stage"] for d in entry["derived"]} == {"crnn_mrvl_0"}
    comparison = mrvl_convert.compare(model, tmp_path / "art", samples=3)
    assert comparison.passed, comparison.summary_line()


def test_a_cell_that_is_not_unrolled_stays_on_cpu_with_its_reason(tmp_path):
    result = mrvl_convert.convert(recurrent.crnn(clip=5.0), tmp_path / "art")
    entry = result.placement("rnn")
    assert entry["placement"] == "cpu"
    assert "LSTM not unrolled: attribute clip is set" in entry["canonical"]
    assert "this one was not (its 'canonical' entry says why)" in entry["reason"]
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl", "cpu", "mrvl"]


@pytest.mark.parametrize("computed", [False, True])
def test_int8_quantizes_around_the_unrolled_cell_whose_steps_run_in_fp16(tmp_path, computed):
    """The recipe leaves the LSTM float (onnxruntime's static QDQ does not quantize it); its
    steps are fp16 layers inside the int8 model, one Mrvl subgraph, no internal error. Verify's
    reference unrolls the QDQ model's cell too and rounds each step where the artifact's fp16
    layers round (verify/kept_fp16.py): the output is bit-equal to it. Judged against the cell
    computed in float32, the fp16 steps moved the int8 head's inputs across quantization
    boundaries: max_rel 0.0147 over a tolerance of 0.01. With W a Concat of constants the
    recipe quantizes W too; the reference folds it as the conversion does, or the cell stayed
    whole there (rec-model: max_abs 0.96)."""
    model = recurrent.crnn(computed_weights=computed)
    samples = np.random.default_rng(0).standard_normal((16, 1, 3, 8, 8)).astype(np.float32)
    result = mrvl_convert.convert(model, tmp_path / "art",
                                  quantize=Quantization(calibration={"image": samples}))
    # As in fp16: the int8 head computes on [1, T, 1, classes] (int8_step_rows.py runs its
    # FC on [1, T, C]); one CPU node, a Squeeze(0), lays that out as the time-major logits.
    stages = result.manifest["stages"]
    assert [s["kind"] for s in stages] == ["mrvl", "cpu"] and stages[1]["nodes"] == 1
    assert result.placement("head")["rule"] == "mrvl.qnn_fc_tokens"
    precision = result.report["precision"]
    assert precision["macs"]["cpu"] == 0 and precision["macs"]["int8"] > 0
    assert [row["nodes"] for row in precision["not_int8"]] == [["rnn"]]
    qdq = tmp_path / "art" / result.manifest["quantization"]["file"]
    comparison = mrvl_convert.compare(qdq, tmp_path / "art", samples=3)
    assert comparison.passed, comparison.summary_line()
    (row,) = [r for r in comparison.rows if r.kind == "output"]
    assert row.max_abs == 0.0, comparison.summary_line()
