"""fp16 sensitivity: the per-layer analysis of an fp16 artifact (accumulated, isolated) and the
error of each layer's weights rounded alone, naming the layers that cost most (issue 30)."""
from __future__ import annotations

import json
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from mrvl_convert import convert
from mrvl_convert.verify.fp16_analysis import analyze_fp16
from mrvl_convert.verify.metrics import Sums, snr_db
from support.fp16_sensitive import SHAPE, cancelling_model, conv_bn_model

SAMPLES = 3


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fp16")
    onnx.save(cancelling_model(), tmp / "m.onnx")
    convert(tmp / "m.onnx", tmp / "art")
    feeds = [{"x": np.random.default_rng(k).standard_normal(SHAPE).astype(np.float32)}
             for k in range(SAMPLES)]
    return tmp, feeds, analyze_fp16(tmp / "m.onnx", tmp / "art", feeds)


def row_of(analysis, node):
    return next(r for r in analysis.layers.rows if node in r.op_nodes)


def output_snr_with_rounded(names, feeds) -> float:
    """The model's output with only ``names`` cast to float16 (numpy's cast, not ours) against
    the model as it is, both on onnxruntime fp32."""
    plain, rounded = cancelling_model(), cancelling_model()
    for tensor in rounded.graph.initializer:
        if tensor.name in names:
            value = numpy_helper.to_array(tensor).astype(np.float16).astype(np.float32)
            tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
           for m in (plain, rounded)]
    sums = Sums()
    for feed in feeds:
        want, got = (s.run(["y"], feed)[0] for s in run)
        sums.add(got, want)
    return snr_db(sums)


def test_the_cancelling_layer_costs_most(analysed):
    _, feeds, analysis = analysed
    culprit = row_of(analysis, "conv_cancel")
    assert analysis.costliest[0].layer == culprit.layer
    assert analysis.candidates()[0].layer == culprit.layer
    figures = analysis.weights[culprit.layer]
    assert figures.initializers == ["w_cancel", "b_cancel"]
    want = output_snr_with_rounded({"w_cancel", "b_cancel"}, feeds)
    assert figures.output_snr_db == pytest.approx(want, rel=1e-6)
    assert figures.output_snr_db < analysis.layers.threshold_db
    # The layer adds the error itself: isolated as low as accumulated.
    assert culprit.isolated_snr_db < analysis.layers.threshold_db
    assert culprit.isolated_snr_db == pytest.approx(culprit.snr_db, abs=0.5)


def test_exact_weights_cost_nothing(analysed):
    _, _, analysis = analysed
    dup = analysis.weights[row_of(analysis, "conv_dup").layer]
    assert dup.snr_db == math.inf and dup.output_snr_db == math.inf
    assert row_of(analysis, "conv_dup").layer not in [r.layer for r in analysis.costliest]
    # The layer after the culprit inherits its error but adds little.
    tail = row_of(analysis, "conv_tail")
    assert tail.snr_db < analysis.layers.threshold_db < tail.isolated_snr_db


def test_table_and_json_name_the_costliest(analysed):
    _, _, analysis = analysed
    culprit = row_of(analysis, "conv_cancel").layer
    table = analysis.format_table()
    assert "weights->out SNR dB" in table
    assert f"cost the outputs most: {culprit} (conv_cancel" in table
    doc = json.loads(json.dumps(analysis.to_dict(), allow_nan=False))  # JSON has no inf
    assert doc["precision"] == "fp16" and doc["costliest"][0] == culprit
    dup = next(w for w in doc["weights"] if w["initializers"] == ["w_dup"])
    assert dup["output_snr_db"] is None and dup["output_exact"] is True


def test_cli_quant_analysis_without_quantize_is_fp16(tmp_path, capsys):
    from mrvl_convert.cli.convert import main

    onnx.save(cancelling_model(), tmp_path / "m.onnx")
    code = main([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"), "--quant-analysis"])
    printed = capsys.readouterr().out
    assert code == 0 and "fp16 sensitivity of m" in printed and "conv_cancel" in printed
    doc = json.loads((tmp_path / "out" / "m" / "fp16_analysis.json").read_text())
    assert doc["samples"] == 8 and doc["costliest"]


def test_mrvl_verify_quant_analysis_of_an_fp16_artifact(analysed, tmp_path, capsys):
    from mrvl_convert.cli.verify import main

    tmp, _, _ = analysed
    code = main([str(tmp / "m.onnx"), str(tmp / "art"), "--quant-analysis", "--json",
                 str(tmp_path / "fa.json")])
    printed = capsys.readouterr().out
    assert code == 0 and "weights->out SNR dB" in printed, printed
    doc = json.loads((tmp_path / "fa.json").read_text())
    assert doc["precision"] == "fp16" and doc["costliest"]


def folded_conv(model: onnx.ModelProto) -> onnx.ModelProto:
    """conv_bn_model's Conv and BatchNormalization as one Conv whose folded weights and bias
    are cast to float16 (numpy, in float64 from the model's numbers)."""
    p = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    scale = p["scale"] / np.sqrt(p["var"] + 1e-5)
    w = (p["w"] * scale[:, None, None, None]).astype(np.float16).astype(np.float32)
    b = (p["shift"] - p["mean"] * scale).astype(np.float16).astype(np.float32)
    conv = onnx.helper.make_node("Conv", ["x", "wf", "bf"], ["y"], pads=[1, 1, 1, 1])
    graph = onnx.helper.make_graph([conv], "folded", list(model.graph.input),
                                   list(model.graph.output),
                                   [numpy_helper.from_array(w, "wf"),
                                    numpy_helper.from_array(b, "bf")])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)],
                                  ir_version=10)


def test_a_folded_layer_rounds_its_fold_once(tmp_path):
    """Conv + BatchNormalization are one Conv2D layer whose artifact holds the fold rounded
    once: the weights-alone figure is that one, not each node's weights rounded apart."""
    model = conv_bn_model()
    onnx.save(model, tmp_path / "m.onnx")
    convert(tmp_path / "m.onnx", tmp_path / "art")
    feeds = [{"x": np.random.default_rng(k).standard_normal(SHAPE).astype(np.float32)}
             for k in range(2)]
    analysis = analyze_fp16(tmp_path / "m.onnx", tmp_path / "art", feeds)
    (row,) = analysis.layers.rows
    assert row.op_nodes == ["conv", "bn"]
    figures = analysis.weights[row.layer]
    assert figures.note == "" and "estimate" not in analysis.format_table()
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
           for m in (model, folded_conv(model))]
    sums = Sums()
    for feed in feeds:
        want, got = (s.run(["y"], feed)[0] for s in run)
        sums.add(got, want)
    assert figures.output_snr_db == pytest.approx(snr_db(sums), abs=0.05)


def test_a_layer_of_other_weighted_nodes_says_its_figure_is_an_estimate(tmp_path):
    """Conv, bias Add, BatchNormalization: not the pair the fold is rewritten for; each node's
    weights are rounded apart and the row says so."""
    model = conv_bn_model()
    bias = numpy_helper.from_array(np.full((1, 4, 1, 1), 0.37, np.float32), "bias")
    model.graph.initializer.append(bias)
    conv, bn = model.graph.node
    conv.output[0] = "c0"
    model.graph.node.insert(1, onnx.helper.make_node("Add", ["c0", "bias"], ["c"], name="add"))
    onnx.save(model, tmp_path / "m.onnx")
    convert(tmp_path / "m.onnx", tmp_path / "art")
    analysis = analyze_fp16(tmp_path / "m.onnx", tmp_path / "art", samples=2)
    (row,) = analysis.layers.rows
    figures = analysis.weights[row.layer]
    assert "conv, add, bn rounded apart" in figures.note
    assert "estimate" in analysis.format_table() and math.isfinite(figures.output_snr_db)
