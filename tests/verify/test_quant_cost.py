"""Two references in every int8 verify (issue 30): the QDQ model (the verdict: is the conversion
exact?) and the fp32 model it was quantized from (what quantization costs: cosine, SNR, top-1
agreement per output), in summary.json, in mrvl-convert's verify line and in mrvl-verify's
table. A model whose int8 form disagrees with fp32 passes verify (the conversion is exact) and
the loss is shown, not hidden behind "max_abs 0"."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize.recipe import quantize_int8

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_cnn"
MODEL = EXAMPLE / "mnist_cnn.onnx"


def close_logits() -> onnx.ModelProto:
    """x [1, 16] -> Gemm -> logits [1, 8] whose columns differ by ~1% of their size: the int8
    rounding of the weights and of the output reorders them often, which fp32 does not."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal((16, 1))
    weight = (base + 0.01 * rng.standard_normal((16, 8))).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["logits"], name="fc")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def ort_outputs(model: Path, feeds: List[dict]) -> List[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return [session.run(None, feed)[0] for feed in feeds]


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lossy")
    src = tmp / "close.onnx"
    onnx.save(close_logits(), src)
    rng = np.random.default_rng(1)
    qdq = quantize_int8(src, tmp / "q.onnx", {"x": rng.standard_normal((32, 16), np.float32)})
    mrvl_convert.convert(qdq, tmp / "out")
    feeds = [{"x": rng.standard_normal((1, 16), np.float32)} for _ in range(24)]
    report = mrvl_convert.compare(qdq, tmp / "out", feeds, fp32=src)
    return src, qdq, feeds, report


def test_an_exact_conversion_passes_and_the_quantization_loss_is_shown(lossy):
    src, qdq, feeds, report = lossy
    assert report.passed and report.judged_rows[0].max_abs == 0  # exact against the QDQ model
    fp32 = ort_outputs(src, feeds)
    int8 = ort_outputs(qdq, feeds)
    agree = np.mean([a.argmax() == b.argmax() for a, b in zip(int8, fp32)])
    (row,) = report.fp32.rows
    assert row.tensor == "logits" and row.top1 == pytest.approx(agree)
    assert row.top1 < 0.9  # the premise: quantizing this model costs agreement
    cos = min(float(np.dot(a.ravel(), b.ravel()) / np.linalg.norm(a) / np.linalg.norm(b))
              for a, b in zip(int8, fp32))
    assert row.cosine == pytest.approx(cos, abs=1e-6)
    assert row.max_abs == pytest.approx(max(np.abs(a - b).max() for a, b in zip(int8, fp32)))


def test_the_verify_line_and_json_carry_the_fp32_figures(lossy):
    report = lossy[3]
    line = report.summary_line()
    assert line.startswith("PASS") and f"top-1 agreement {report.fp32.rows[0].top1:.4f}" in \
        line.split("against fp32")[1]
    doc = report.to_dict()["fp32"]
    assert doc["model"] == str(lossy[0]) and doc["samples"] == 24
    assert doc["outputs"][0]["top1"] == report.fp32.rows[0].top1
    table = report.format_table()
    assert "against the fp32 model" in table and "not the verdict" in table


def test_without_fp32_there_is_no_second_reference(lossy):
    _, qdq, feeds, _ = lossy
    report = mrvl_convert.compare(qdq, Path(qdq).parent / "out", feeds[:2])
    assert report.fp32 is None and "fp32" not in report.summary_line()


def test_mrvl_convert_verify_writes_both_references_to_summary_json(tmp_path, capsys):
    from mrvl_convert.cli.convert import main

    images = np.load(EXAMPLE / "heldout.npz")["images"]
    np.savez(tmp_path / "cal.npz", input=images[:16])
    np.savez(tmp_path / "test.npz", input=images[100:116])
    code = main([str(MODEL), "-o", str(tmp_path / "out"), "--quantize", "int8", "--calibration",
                 str(tmp_path / "cal.npz"), "--verify", "--verify-inputs",
                 str(tmp_path / "test.npz")])
    out = capsys.readouterr().out
    assert code == 0
    verify = json.loads((tmp_path / "out" / "summary.json").read_text())["models"][0]["verify"]
    assert verify["passed"] and verify["outputs"][0]["max_abs"] == 0
    assert Path(verify["reference"]).name == "mnist_cnn.int8.onnx"
    fp32 = verify["fp32"]
    assert fp32["model"] == str(MODEL) and fp32["samples"] == 16
    qdq = tmp_path / "out" / "mnist_cnn" / "mnist_cnn.int8.onnx"
    feeds = [{"input": images[k:k + 1]} for k in range(100, 116)]
    agree = np.mean([a.argmax() == b.argmax() for a, b in
                     zip(ort_outputs(qdq, feeds), ort_outputs(MODEL, feeds))])
    assert fp32["outputs"][0]["tensor"] == "logits"
    assert fp32["outputs"][0]["top1"] == pytest.approx(agree)
    assert "verify mnist_cnn: PASS" in out and "against fp32 (what quantization costs)" in out


def test_mrvl_verify_given_the_fp32_model_judges_against_the_qdq_model(lossy, capsys):
    from mrvl_convert.cli.verify import main

    src, qdq, feeds, report = lossy
    np.savez(Path(qdq).parent / "in.npz", x=np.concatenate([f["x"] for f in feeds]))
    code = main([str(src), str(Path(qdq).parent / "out"), "--inputs",
                 str(Path(qdq).parent / "in.npz")])
    out = capsys.readouterr().out
    # converted from a QDQ model given by hand: the artifact keeps none, so fp32 is judged
    assert code == 3 and "against the fp32 model" not in out
    code = main([str(qdq), str(Path(qdq).parent / "out"), "--inputs",
                 str(Path(qdq).parent / "in.npz"), "--fp32-model", str(src)])
    out = capsys.readouterr().out
    assert code == 0 and "PASS: 1/1" in out
    assert f"top-1 agreement {report.fp32.rows[0].top1:.4f}" in out


def test_mrvl_verify_on_a_converter_quantized_artifact_swaps_the_references(tmp_path, capsys):
    from mrvl_convert.cli.convert import main as convert_main
    from mrvl_convert.cli.verify import main

    images = np.load(EXAMPLE / "heldout.npz")["images"]
    np.savez(tmp_path / "cal.npz", input=images[:16])
    assert convert_main([str(MODEL), "-o", str(tmp_path / "out"), "--quantize", "int8",
                         "--calibration", str(tmp_path / "cal.npz"), "--quiet"]) == 0
    np.savez(tmp_path / "in.npz", input=images[200:204])
    code = main([str(MODEL), str(tmp_path / "out" / "mnist_cnn"), "--inputs",
                 str(tmp_path / "in.npz"), "--layers"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "judged against the QDQ model it was converted from" in out
    assert "against the fp32 model" in out
    compared = re.search(r"; (\d+) of (\d+) layer\(s\) compared;", out)
    assert compared and compared.group(1) == compared.group(2) != "0"  # layers vs the QDQ model
