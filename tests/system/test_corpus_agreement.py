"""The real corpus's int8 agreement figures (benchmarks/real_corpus_agreement.py): an output
with one value per sample is judged by its error over its peak, not by a cosine that is always
+-1 (silero_vad_v6's speech_probs, off by 2.9 times its peak, was not named); top-1 only for a
Softmax's class distribution, not a regression output (rnet's box). The one-value rule itself
is verify's (tests/verify/test_int8_output_kinds.py). Built here; nothing is downloaded."""
from __future__ import annotations

from types import SimpleNamespace

import onnx
import pytest
from onnx import TensorProto, helper

from support.benchmarks import bench_module

agreement = bench_module("real_corpus_agreement")
table = bench_module("real_corpus_table")

pytestmark = pytest.mark.system


def _row(tensor, cosine, top1=None, over_peak=None):
    return SimpleNamespace(tensor=tensor, cosine=cosine, top1=top1, over_peak=over_peak)


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
    rows = [_row("box", 0.99, top1=0.25), _row("prob", 0.98, top1=1.0),
            _row("speech", None, over_peak=0.07)]
    figures = agreement.agreement(rows, [], _two_heads())
    assert figures["top1"] == 1.0  # the box's 0.25 is no agreement of classes
    assert figures["cosine"] == 0.98 and figures["wrecked"] == []
    assert figures["one_value_err"] == 0.07


def test_the_row_names_what_verify_names():
    rows = [_row("speech", None, over_peak=2.86), _row("prob", 0.95, 1.0)]
    figures = agreement.agreement(rows, rows[:1], _two_heads())
    assert figures["wrecked"] == ["speech"] and figures["cosine"] == 0.95


def test_int8_table_header_names_the_one_value_rule():
    line = table.INT8_HEAD.splitlines()
    assert "one value: error > 0.5 peak" in line[0]
    assert line[0].count("|") == line[1].count("|")
