"""The real corpus's int8 agreement figures (benchmarks/real_corpus_agreement.py): an output
with one value per sample is judged by its error over its peak, not by a cosine that is always
+-1 (silero_vad_v6's speech_probs, off by 2.9 times its peak, was not named); top-1 only for a
Softmax's class distribution, not a regression output (rnet's box). Built here; nothing is
downloaded."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from support.benchmarks import bench_module

agreement = bench_module("real_corpus_agreement")
table = bench_module("real_corpus_table")

pytestmark = pytest.mark.system


def _row(tensor, cosine, top1=None, max_abs=0.0):
    return SimpleNamespace(tensor=tensor, cosine=cosine, top1=top1, max_abs=max_abs)


def _two_heads() -> onnx.ModelProto:
    """rnet's form: a box regression [1, 4] from a Gemm, class probabilities [1, 2] from a
    Softmax (behind a Flatten), and a Sigmoid probability [1, 1]."""
    nodes = [helper.make_node("Gemm", ["x", "w"], ["box"], name="box"),
             helper.make_node("Softmax", ["x2"], ["p"], name="softmax", axis=1),
             helper.make_node("Flatten", ["p"], ["prob"], name="flatten"),
             helper.make_node("Sigmoid", ["x1"], ["speech"], name="sigmoid")]
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
              for n, s in (("box", [1, 4]), ("prob", [1, 2]), ("speech", [1, 1]))]
    graph = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info(
        n, TensorProto.FLOAT, s) for n, s in (("x", [1, 4]), ("x2", [1, 2]), ("x1", [1, 1]))],
        values, [helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.0] * 16)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_top1_only_for_a_softmax_output():
    assert agreement.class_distributions(_two_heads()) == {"prob"}
    fp32 = {"box": [np.ones([1, 4])], "prob": [np.ones([1, 2])], "speech": [np.ones([1, 1])]}
    rows = [_row("box", 0.99, top1=0.25), _row("prob", 0.98, top1=1.0),
            _row("speech", 1.0, max_abs=0.01)]
    figures = agreement.agreement(rows, fp32, _two_heads())
    assert figures["top1"] == 1.0  # the box's 0.25 is no agreement of classes
    assert figures["cosine"] == 0.98 and figures["wrecked"] == []


def test_one_value_output_is_judged_by_its_error_over_its_peak():
    """speech_probs: fp32 peaks at 0.135 over the samples, int8 off by 0.386: cosine 1.0 per
    sample, yet the output is wrecked."""
    fp32 = {"speech": [np.array([[0.135]]), np.array([[0.05]])],
            "box": [np.ones([1, 4]), np.ones([1, 4])], "prob": [np.ones([1, 2])] * 2}
    rows = [_row("speech", 1.0, max_abs=0.386), _row("box", 0.97), _row("prob", 0.95, 1.0)]
    figures = agreement.agreement(rows, fp32, _two_heads())
    assert figures["wrecked"] == ["speech"]
    assert figures["one_value_err"] == pytest.approx(0.386 / 0.135)
    assert figures["cosine"] == 0.95  # the vectors' worst; the one value's 1.0 is no figure
    fine = agreement.agreement([_row("speech", 1.0, max_abs=0.02)], fp32, _two_heads())
    assert fine["wrecked"] == [] and fine["cosine"] is None


def test_a_vector_below_the_cosine_bound_is_still_named():
    fp32 = {"box": [np.ones([1, 4])]}
    figures = agreement.agreement([_row("box", 0.5)], fp32, _two_heads())
    assert figures["wrecked"] == ["box"] and figures["top1"] is None


def test_int8_table_header_names_the_one_value_rule():
    line = table.INT8_HEAD.splitlines()
    assert "one value: error > 0.5 peak" in line[0]
    assert line[0].count("|") == line[1].count("|")
