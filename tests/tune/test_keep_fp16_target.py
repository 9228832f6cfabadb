"""``--keep-fp16 auto --min-agreement P`` (``tune/keep_fp16.py``, ``tune/agreement.py``; issue
30): layers given back to fp16 worst first until the int8 artifact's top-1 agreement with the
fp32 model reaches the target, and what that cost, said plainly when it is not reached."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.cli.convert import main
from mrvl_convert.errors import OptionError
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.tune.agreement import Agreement, top1_agreement
from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16
from mrvl_convert.verify.quant_analysis import KEEPABLE_LAYERS


def outlier_convs() -> onnx.ModelProto:
    """conv1 -> conv2 -> conv3, y [1, 6, 8, 8]. One weight of conv1 is 50 (reading input
    channel 2, which the data keeps ~0.01): its per-tensor scale rounds every other conv1 weight
    to 0 or one step, so int8 loses the argmax over the last axis often; conv1 in fp16 mends it."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 3, 3, 3)) * 0.3
    w1[0, 2, 1, 1] = 50.0
    inits = {"w1": w1, "b1": np.zeros(8), "w2": rng.standard_normal((8, 8, 3, 3)) * 0.2,
             "b2": np.zeros(8), "w3": rng.standard_normal((6, 8, 1, 1)) * 0.3, "b3": np.zeros(6)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Conv", ["c1", "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
             helper.make_node("Conv", ["c2", "w3", "b3"], ["y"], name="conv3")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 6, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def samples(count: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((count, 3, 8, 8)).astype(np.float32)
    x[:, 2] *= 0.01
    return x


def feeds(x: np.ndarray) -> List[Dict[str, np.ndarray]]:
    return [{"x": x[k:k + 1]} for k in range(len(x))]


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("target")
    src = tmp / "m.onnx"
    onnx.save(outlier_convs(), src)
    return src, {"x": samples(16, 1)}, feeds(samples(8, 2)), tmp


def own_agreement(src: Path, artifact: Path, test) -> float:
    """Top-1 over the last axis, counted here from scratch: the hybrid against onnxruntime."""
    reference = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    hybrid = mrvl_convert.HybridSession(artifact)
    same = [(hybrid.run(None, f)[0].argmax(-1) == reference.run(None, f)[0].argmax(-1))
            for f in test]
    return float(np.mean(np.concatenate([s.ravel() for s in same])))


@pytest.fixture(scope="module")
def plain(case):
    src, calibration, test, tmp = case
    quantize_int8(src, tmp / "plain.onnx", calibration)
    mrvl_convert.convert(tmp / "plain.onnx", tmp / "plain")
    return own_agreement(src, tmp / "plain", test)


def test_agreement_is_the_top1_over_the_last_axis(case, plain):
    src, _, test, tmp = case
    measured = top1_agreement(src, tmp / "plain", test)
    assert measured.value == pytest.approx(plain, abs=1e-12)
    assert measured.samples == len(test) and list(measured.per_output) == ["y"]
    assert plain < 0.9  # what the target is for: int8 alone loses the argmax


def test_a_target_int8_already_meets_keeps_nothing(case, plain):
    src, calibration, test, tmp = case
    result = quantize_keep_fp16(src, tmp / "low.onnx", calibration, "auto", inputs=test,
                                min_agreement=plain, threshold_db=-100.0)
    assert result.rounds == [] and result.kept == [] and result.reached
    assert result.agreement == result.agreement_before == pytest.approx(plain)
    assert result.stages_before == result.stages_after == {"mrvl": 1, "cpu": 0}


def test_the_target_keeps_the_worst_layer_first_and_reaches_it(case, plain):
    """threshold -100 dB: without a target, auto would keep nothing; the target goes on."""
    src, calibration, test, tmp = case
    result = quantize_keep_fp16(src, tmp / "keep.onnx", calibration, "auto", inputs=test,
                                min_agreement=0.95, threshold_db=-100.0)
    assert result.rounds and result.rounds[0].nodes == ["conv1"] and result.rounds[0].accepted
    assert float_nodes(result.model) == result.kept
    assert all(r.layer_name in KEEPABLE_LAYERS for r in result.rounds)
    assert result.agreement_before == pytest.approx(plain)
    assert result.reached and result.agreement >= 0.95
    mrvl_convert.convert(result.model, tmp / "keep")
    assert own_agreement(src, tmp / "keep", test) == pytest.approx(result.agreement)
    assert result.stages_after == {"mrvl": 1, "cpu": 0}  # fp16 layers in the same stage
    doc = result.to_dict()
    assert doc["reached"] is True and doc["layers"] == [r.layer for r in result.rounds]
    assert doc["nodes"][0] == "conv1" and "(conv1" in result.summary()
    assert "reached" in result.summary() and "NOT" not in result.summary()


def float_nodes(qdq: Path) -> List[str]:
    """The Conv nodes of a QDQ model whose weight is float (not read through a
    DequantizeLinear): those left out of quantization."""
    model = onnx.load(str(qdq))
    dequantized = {o for n in model.graph.node if n.op_type == "DequantizeLinear"
                   for o in n.output}
    return [n.name for n in model.graph.node if n.op_type == "Conv"
            and n.input[1] not in dequantized]


def test_a_layer_that_lowers_the_agreement_is_tried_and_dropped(case, monkeypatch):
    """The agreements measured, in order: 0.5 (int8), 0.4 (worst layer tried: dropped), 0.7
    (next: kept), 0.6 (next: dropped). The model written is the 0.7 one."""
    src, calibration, test, tmp = case
    measured = iter([0.5, 0.4, 0.7, 0.6])

    def fake(float_model, artifact, feeds):
        return Agreement({"y": next(measured)}, len(feeds))

    monkeypatch.setattr("mrvl_convert.tune.keep_fp16.top1_agreement", fake)
    result = quantize_keep_fp16(src, tmp / "drop.onnx", calibration, "auto", inputs=test,
                                min_agreement=0.95, max_rounds=3)
    assert [r.accepted for r in result.rounds] == [False, True, False]
    assert [r.agreement for r in result.rounds] == [0.4, 0.7, 0.6]
    assert result.rounds[0].nodes == ["conv1"]  # the worst, tried first
    assert result.kept == result.rounds[1].nodes and result.agreement == 0.7
    assert float_nodes(result.model) == result.kept  # rewritten after the last drop
    doc = result.to_dict()
    assert doc["layers"] == [result.rounds[1].layer] and len(doc["rejected"]) == 2
    assert not result.reached and "NOT reached" in result.summary()
    assert "2 tried and dropped" in result.summary()


def test_an_unreached_target_is_said_plainly_not_raised(case, plain):
    src, calibration, test, tmp = case
    result = quantize_keep_fp16(src, tmp / "one.onnx", calibration, "auto", inputs=test,
                                min_agreement=1.0, max_rounds=0)
    assert not result.reached and result.rounds == []
    assert result.agreement == pytest.approx(plain)
    assert "NOT reached" in result.summary()


@pytest.mark.parametrize("keep, target", [(["conv1"], 0.9), ("auto", 0.0), ("auto", 1.5)])
def test_a_target_without_auto_or_out_of_range_is_an_option_error(case, keep, target):
    src, calibration, _, tmp = case
    with pytest.raises(OptionError):
        quantize_keep_fp16(src, tmp / "bad.onnx", calibration, keep, min_agreement=target)


@pytest.mark.parametrize("extra", [["--min-agreement", "0.9"],
                                   ["--keep-fp16", "conv1", "--min-agreement", "0.9"],
                                   ["--keep-fp16", "auto", "--min-agreement", "2"]])
def test_cli_refuses_min_agreement_without_auto_or_out_of_range(case, extra, capsys):
    src, calibration, _, tmp = case
    np.savez(tmp / "cal.npz", **calibration)
    code = main([str(src), "-o", str(tmp / "cli_bad"), "--quantize", "int8",
                 "--calibration", str(tmp / "cal.npz"), *extra])
    assert code == 2 and "min-agreement" in capsys.readouterr().err


def test_cli_min_agreement_reports_in_the_line_and_the_manifest(case, capsys):
    src, calibration, _, tmp = case
    np.savez(tmp / "cal.npz", **calibration)
    code = main([str(src), "-o", str(tmp / "cli"), "--quantize", "int8", "--calibration",
                 str(tmp / "cal.npz"), "--keep-fp16", "auto", "--min-agreement", "0.95",
                 "--snr-threshold", "-100"])
    assert code == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if "top-1 agreement" in l)
    manifest = json.loads((tmp / "cli" / "m" / "manifest.json").read_text())
    auto = manifest["quantization"]["keep_fp16_auto"]
    assert auto["min_agreement"] == 0.95 and auto["layers"]
    assert ("NOT reached" in line) == (not auto["reached"])
    assert manifest["quantization"]["keep_fp16"]
