"""The quantization analysis compares every Mrvl layer with the float tensor it really stands
for (issue 30): a Conv whose BatchNormalization was folded into it before quantizing is judged
against the BatchNormalization's output, not the Conv's raw output; a decomposed PRelu's steps
against the decomposition's own tensors; in int8 and in fp16. A false flag would also steer
``--keep-fp16 auto``."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16
from mrvl_convert.verify.metrics import Sums, snr_db
from support.rewrites import sum_of_three

THRESHOLD = 20.0


def conv_bn_model(prelu: bool = False, batch: int = 1) -> onnx.ModelProto:
    """conv1 -> bn1 -> sigmoid (or PRelu) -> conv2. The BatchNormalization scales by 4..8 and
    shifts by several units: its output is far (in SNR) from the Conv's raw output, so a layer
    compared with the pre-BN tensor is flagged whatever its quantization does."""
    rng = np.random.default_rng(0)
    c = 8
    inits = {"w1": rng.standard_normal((c, 3, 3, 3)) * 0.3, "b1": np.zeros(c),
             "g": rng.uniform(4, 8, c), "beta": rng.uniform(2, 5, c),
             "mean": rng.uniform(-3, 3, c), "var": rng.uniform(0.05, 0.2, c),
             "w2": rng.standard_normal((4, c, 1, 1)) * 0.3, "b2": np.zeros(4),
             "slope": rng.uniform(0.1, 0.3, (c, 1, 1))}
    act = helper.make_node("PRelu", ["n1", "slope"], ["a1"], name="prelu1") if prelu else \
        helper.make_node("Sigmoid", ["n1"], ["a1"], name="sig1")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["n1"],
                              name="bn1"),
             act, helper.make_node("Conv", ["a1", "w2", "b2"], ["y"], name="conv2")]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, 4, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()
         if prelu or k != "slope"])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def samples(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 3, 8, 8)).astype(np.float32)


def feeds(x: np.ndarray) -> List[Dict[str, np.ndarray]]:
    return [{"x": x[k:k + 1]} for k in range(x.shape[0])]


def float_tensors(model: Path, names: List[str], x: np.ndarray) -> Dict[str, np.ndarray]:
    proto = onnx.load(str(model))
    proto.graph.output.extend(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in names)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    runs = [session.run(names, feed) for feed in feeds(x)]
    return {n: np.concatenate([run[k] for run in runs]) for k, n in enumerate(names)}


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qa_bn")
    src = tmp / "bn.onnx"
    onnx.save(conv_bn_model(), src)
    calibration = {"x": samples(16, 1)}
    mrvl_convert.convert(quantize_int8(src, tmp / "q.onnx", calibration), tmp / "out")
    test = samples(4, 2)
    analysis = mrvl_convert.analyze_quantization(src, tmp / "out", feeds(test),
                                                 threshold_db=THRESHOLD)
    return src, calibration, test, analysis


def test_the_pre_bn_tensor_is_far_from_the_post_bn_one(folded):
    """The premise: judged against the Conv's raw output, conv1 would be flagged."""
    src, _, test, _ = folded
    values = float_tensors(src, ["c1", "n1"], test)
    sums = Sums()
    sums.add(values["c1"], values["n1"])
    assert snr_db(sums) < THRESHOLD


def test_a_folded_conv_is_compared_with_the_batchnorm_output(folded):
    analysis = folded[3]
    row = analysis.row_for("conv1")
    assert (row.layer_name, row.dtype, row.tensor) == ("Conv2D", "int8", "n1")
    assert row.snr_db > THRESHOLD and row.isolated_snr_db > THRESHOLD
    # the layer after it is isolated on the right input too
    assert analysis.row_for("sig1").isolated_snr_db > THRESHOLD


def test_a_bn_folded_model_flags_no_layer_above_the_threshold(folded):
    analysis = folded[3]
    assert analysis.first_below is None and analysis.below_isolated == []
    assert not analysis.unmapped
    assert "every layer's accumulated SNR is at least 20 dB" in analysis.format_table()


def test_keep_fp16_auto_acts_on_no_false_flag(folded, tmp_path):
    src, calibration, test, _ = folded
    result = quantize_keep_fp16(src, tmp_path / "kept.onnx", calibration, "auto",
                                inputs=feeds(test), threshold_db=THRESHOLD)
    assert result.kept == [] and result.rounds == []


def test_a_flag_still_names_a_layer_truly_below_the_threshold(folded):
    """The same model judged at a threshold above conv1's true SNR: conv1 is named, with the
    SNR it has against the BatchNormalization's output (the fix hides no real loss)."""
    src, _, test, analysis = folded
    conv1 = analysis.row_for("conv1")
    strict = mrvl_convert.analyze_quantization(src, Path(src).parent / "out", feeds(test),
                                               threshold_db=conv1.snr_db + 1)
    assert strict.first_below.layer == conv1.layer
    assert strict.first_below.snr_db == pytest.approx(conv1.snr_db)


def test_an_fp16_artifact_of_the_model_maps_to_the_batchnorm_output_too(folded, tmp_path):
    src, _, test, _ = folded
    mrvl_convert.convert(src, tmp_path / "out16")
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out16", feeds(test),
                                                 threshold_db=THRESHOLD)
    row = analysis.row_for("conv1")
    assert row.dtype == "float32" and row.tensor != "c1"
    assert analysis.first_below is None and analysis.below_isolated == []


def test_the_steps_of_a_decomposed_prelu_are_compared_with_their_own_tensors(tmp_path):
    src = tmp_path / "prelu.onnx"
    onnx.save(conv_bn_model(prelu=True), src)
    mrvl_convert.convert(quantize_int8(src, tmp_path / "q.onnx", {"x": samples(16, 1)}),
                         tmp_path / "out")
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", feeds(samples(4, 2)),
                                                 threshold_db=THRESHOLD)
    tensors = {r.tensor for r in analysis.rows}
    assert {"n1", "prelu1_pos", "prelu1_neg", "prelu1_scaled", "a1"} <= tensors
    assert not analysis.unmapped
    assert analysis.first_below is None and analysis.below_isolated == []


def test_the_analysis_counts_samples_not_feeds(folded, tmp_path):
    """A feed of two samples counts two: the verdict's count is the samples compared."""
    test, analysis = folded[2], folded[3]
    src = tmp_path / "bn2.onnx"
    onnx.save(conv_bn_model(batch=2), src)
    mrvl_convert.convert(quantize_int8(src, tmp_path / "q.onnx", {"x": samples(16, 1)}),
                         tmp_path / "out")
    pairs = [{"x": test[k:k + 2]} for k in range(0, 4, 2)]
    doubled = mrvl_convert.analyze_quantization(src, tmp_path / "out", pairs,
                                                threshold_db=THRESHOLD)
    assert analysis.samples == 4 and doubled.samples == 4
    assert doubled.verdict().startswith(f"{len(doubled.rows)} layers over 4 sample(s);")


def test_a_batchnorm_the_converter_took_itself_is_not_folded_in_the_mapping(folded, tmp_path):
    """fp16, the Conv denied to the accelerator: the BatchNormalization is a layer of its own
    (a depthwise Conv2D named after it) and is compared with its own output, not left
    unmapped because the quantizer would have folded it."""
    src, _, test, _ = folded
    mrvl_convert.convert(src, tmp_path / "out", deny=["conv1"])
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", feeds(test),
                                                 threshold_db=THRESHOLD)
    row = analysis.row_for("bn1")
    assert row is not None and row.tensor in ("n1", "a1") and not analysis.unmapped
    assert analysis.first_below is None


@pytest.mark.parametrize("int8", [False, True])
def test_a_layer_of_a_canonical_rewrite_is_compared_with_its_own_tensor(tmp_path, int8):
    src = tmp_path / "sum.onnx"
    onnx.save(sum_of_three(), src)
    model = quantize_int8(src, tmp_path / "q.onnx", {"x": samples(16, 1)}) if int8 else src
    mrvl_convert.convert(model, tmp_path / "out")
    test = samples(4, 2)
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", feeds(test),
                                                 threshold_db=THRESHOLD)
    assert not analysis.unmapped
    partial = analysis.row_for("sum1_add1")
    assert partial is not None and partial.layer_name == "Sum2D"
    assert partial.snr_db > THRESHOLD and partial.isolated_snr_db > THRESHOLD
    # the second Add reads the partial sum: it now has a reference, so it is isolated too
    assert analysis.row_for("sum1").isolated_snr_db > THRESHOLD
