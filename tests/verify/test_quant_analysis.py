"""Per-layer quantization analysis (SNR and cosine of every int8 Mrvl layer against the float
model, accumulated and isolated) and ``--keep-fp16 NODE|auto`` (issue 19)."""
from __future__ import annotations

import json
import math
from typing import Dict, List

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.verify.metrics import Sums as _Sums, cosine, snr_db
from support.int8 import needs_relu_sharing_scale

THRESHOLD = 20.0


def three_convs(outlier: bool, names: bool = True, relu: bool = False) -> onnx.ModelProto:
    """conv1 -> conv2 -> conv3 (with ``relu``, a Relu after conv1 and conv2: onnxruntime
    before 1.19 gives it a scale of its own, which becomes a requant layer). With ``outlier``, one weight of conv1 is 50
    (reading input channel 2, which the data keeps ~0.01): the per-tensor weight scale it
    forces (50/127) rounds every other conv1 weight (~0.3) to 0 or one step, an error conv1
    adds itself; its output range stays ordinary, so the later layers quantize well."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 3, 3, 3)) * 0.3
    if outlier:
        w1[0, 2, 1, 1] = 50.0
    inits = {"w1": w1, "b1": np.zeros(8), "w2": rng.standard_normal((8, 8, 3, 3)) * 0.2,
             "b2": np.zeros(8), "w3": rng.standard_normal((4, 8, 1, 1)) * 0.3, "b3": np.zeros(4)}
    spec = [("Conv", ["x", "w1", "b1"], "c1", "conv1", {"pads": [1] * 4}),
            ("Relu", ["c1"], "r1", "relu1", {}),
            ("Conv", ["r1", "w2", "b2"], "c2", "conv2", {"pads": [1] * 4}),
            ("Relu", ["c2"], "r2", "relu2", {}),
            ("Conv", ["r2", "w3", "b3"], "y", "conv3", {})]
    if not relu:
        spec = [(op, [{"r1": "c1", "r2": "c2"}.get(t, t) for t in ins], out, name, attrs)
                for op, ins, out, name, attrs in spec if op != "Relu"]
    nodes = [helper.make_node(op, ins, [out], name=name if names else "", **attrs)
             for op, ins, out, name, attrs in spec]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def samples(count: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((count, 3, 8, 8)).astype(np.float32)
    x[:, 2] *= 0.01
    return x


def feeds(x: np.ndarray) -> List[Dict[str, np.ndarray]]:
    return [{"x": x[k:k + 1]} for k in range(x.shape[0])]


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    """The outlier model, quantized with Marvell's recipe, converted and analysed."""
    tmp = tmp_path_factory.mktemp("qa_bad")
    src = tmp / "bad.onnx"
    onnx.save(three_convs(outlier=True), src)
    calibration = {"x": samples(16, 1)}
    qdq = quantize_int8(src, tmp / "q.onnx", calibration)
    mrvl_convert.convert(qdq, tmp / "out")
    test = feeds(samples(6, 2))
    analysis = mrvl_convert.analyze_quantization(src, tmp / "out", test, threshold_db=THRESHOLD)
    return src, calibration, test, analysis, tmp


# ---------------------------------------------------------------------------------- judging
def test_snr_and_cosine_are_the_textbook_formulas():
    sums = _Sums()
    sums.add(np.array([0.9, 0.1]), np.array([1.0, 0.0]))
    assert snr_db(sums) == pytest.approx(10 * math.log10(1.0 / 0.02))
    assert cosine(sums) == pytest.approx(0.9 / math.sqrt(0.82))
    exact = _Sums()
    exact.add(np.array([1.0, -2.0]), np.array([1.0, -2.0]))
    assert snr_db(exact) == math.inf and cosine(exact) == pytest.approx(1.0)


def test_sums_accumulate_over_samples_not_average_per_sample():
    """One loud sample with small error and one quiet sample with the same error: the SNR is
    that of the concatenated tensors."""
    sums = _Sums()
    sums.add(np.array([10.1]), np.array([10.0]))
    sums.add(np.array([0.1]), np.array([0.0]))
    assert snr_db(sums) == pytest.approx(10 * math.log10(100.0 / 0.02))


# ---------------------------------------------------------------------------------- collecting
def test_every_layer_maps_to_the_float_tensor_it_computes(bad):
    *_, analysis, _ = bad
    by_tensor = {(r.layer_name, r.dtype): r.tensor for r in analysis.rows}
    assert by_tensor[("quant", "int8")] == "x"            # the region entry, named after x
    convs = [r for r in analysis.rows if r.layer_name == "Conv2D"]
    assert [r.tensor for r in convs] == ["c1", "c2", "y"]
    assert [r.op_nodes for r in convs] == [["conv1"], ["conv2"], ["conv3"]]
    assert not analysis.unmapped
    assert all(r.snr_db is not None and r.isolated_snr_db is not None for r in analysis.rows)


@needs_relu_sharing_scale
def test_a_conv_with_its_relu_fused_maps_to_the_relu_output(tmp_path):
    src = tmp_path / "relu.onnx"
    onnx.save(three_convs(outlier=False, relu=True), src)
    qdq = quantize_int8(src, tmp_path / "q.onnx", {"x": samples(8, 1)})
    mrvl_convert.convert(qdq, tmp_path / "out")
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", feeds(samples(2, 2)))
    convs = [r for r in analysis.rows if r.layer_name == "Conv2D"]
    assert [r.tensor for r in convs] == ["r1", "r2", "y"]  # the fused Relu's output, then y
    assert [r.op_nodes for r in convs] == [["conv1", "relu1"], ["conv2", "relu2"], ["conv3"]]


def test_the_layer_that_adds_the_error_is_told_from_those_that_inherit_it(bad):
    """conv1 is below the threshold accumulated and isolated; conv2 and conv3 are below it
    accumulated only (they inherit conv1's error); the table names conv1 first."""
    *_, analysis, _ = bad
    conv1, conv2, conv3 = [r for r in analysis.rows if r.layer_name == "Conv2D"]
    assert analysis.first_below is conv1
    assert conv1.snr_db < THRESHOLD and conv1.isolated_snr_db < THRESHOLD
    for row in (conv2, conv3):
        assert row.snr_db < THRESHOLD < row.isolated_snr_db, row
    assert analysis.below_isolated == [conv1]
    assert analysis.worst() is conv1
    text = analysis.format_table()
    assert f"first layer below {THRESHOLD:g} dB accumulated: {conv1.layer}" in text
    assert "(Conv2D conv1," in text


def test_first_conv_isolated_equals_accumulated(bad):
    """The first layer's input is the quantized model input in both runs: the same figures."""
    *_, analysis, _ = bad
    conv1 = next(r for r in analysis.rows if r.layer_name == "Conv2D")
    assert conv1.isolated_snr_db == pytest.approx(conv1.snr_db, abs=1e-9)


def test_clean_model_is_above_the_threshold_and_not_exact(tmp_path):
    """Without the outlier every int8 layer is within int8's reach: above the threshold, below
    the ~70 dB of fp16 (int8 is not exact), and cosines near 1."""
    src = tmp_path / "clean.onnx"
    onnx.save(three_convs(outlier=False), src)
    qdq = quantize_int8(src, tmp_path / "q.onnx", {"x": samples(16, 1)})
    mrvl_convert.convert(qdq, tmp_path / "out")
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", feeds(samples(4, 2)))
    assert analysis.first_below is None and analysis.below_isolated == []
    for row in analysis.rows:
        assert THRESHOLD < row.snr_db < 60 and row.cosine > 0.999, row


def test_json_rows_write_an_exact_layer_as_null(bad):
    *_, analysis, _ = bad
    row = analysis.rows[0]
    row.isolated_snr_db = math.inf
    doc = json.loads(json.dumps(analysis.to_dict(), allow_nan=False))
    assert doc["rows"][0]["isolated_snr_db"] is None and doc["rows"][0]["isolated_exact"]
    assert doc["first_below"] == analysis.first_below.layer


# ------------------------------------------------------------------------------- keep-fp16
@pytest.fixture(scope="module")
def kept(bad):
    src, calibration, test, _, tmp = bad
    result = quantize_keep_fp16(src, tmp / "keep.onnx", calibration, ["auto"], inputs=test,
                                threshold_db=THRESHOLD)
    mrvl_convert.convert(result.model, tmp / "keep_out")
    return result, tmp / "keep_out"


def test_keep_fp16_auto_raises_the_worst_layer_above_the_threshold(bad, kept):
    *_, before, _ = bad
    result, _ = kept
    worst = before.worst()
    assert worst.isolated_snr_db < THRESHOLD
    assert [r.nodes for r in result.rounds] == [worst.op_nodes]  # one round, then none below
    assert result.kept == ["conv1"]
    after = result.analysis.row_for("conv1")
    assert after.dtype == "float32" and after.layer_name == "Conv2D"
    assert after.isolated_snr_db > THRESHOLD and after.snr_db > THRESHOLD
    assert result.analysis.first_below is None


def test_keep_fp16_model_runs_end_to_end_and_is_closer_to_fp32(bad, kept):
    """The mixed model runs in the hybrid in one accelerator stage (fp16 conv1 between quant
    layers), and its output is nearer the fp32 model's than the all-int8 one's."""
    src, _, test, _, tmp = bad
    _, out = kept
    session = mrvl_convert.HybridSession(out)
    assert [s.kind for s in session.stages] == ["mrvl"]
    reference = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    int8 = mrvl_convert.HybridSession(tmp / "out")

    def output_snr(hybrid) -> float:
        sums = _Sums()
        for feed in test:
            sums.add(hybrid.run(None, feed)[0], reference.run(None, feed)[0])
        return snr_db(sums)

    mixed, all_int8 = output_snr(session), output_snr(int8)
    assert all_int8 < THRESHOLD < mixed, (all_int8, mixed)


def test_keep_fp16_named_node_becomes_an_fp16_layer(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(three_convs(outlier=False), src)
    result = quantize_keep_fp16(src, tmp_path / "q.onnx", {"x": samples(8, 1)}, "conv2")
    assert result.kept == ["conv2"] and not result.rounds
    converted = mrvl_convert.convert(result.model, tmp_path / "out")
    places = {n["name"]: n for n in converted.report["nodes"]}
    assert places["conv2"]["placement"] == "mrvl"
    assert places["conv2"]["rule"] == "mrvl.conv2d_nhwc2nhwc"   # the float rule
    assert places["conv1"]["rule"] == "mrvl.qnn_conv2d"
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", feeds(samples(2, 2)))
    assert analysis.row_for("conv2").dtype == "float32"
    assert analysis.row_for("conv3").dtype == "int8"


def test_keep_fp16_gemm_becomes_an_fp16_fc_layer_at_a_quant_boundary(tmp_path):
    """Flatten -> Gemm -> Relu -> Gemm with the first Gemm kept: a float FC (its Relu fused)
    in the same stage as the int8 FC, a quant layer between them."""
    rng = np.random.default_rng(2)
    inits = {"w": rng.standard_normal((10, 48)) * 0.2, "b": rng.standard_normal(10) * 0.1,
             "w2": rng.standard_normal((5, 10)) * 0.3, "b2": np.zeros(5)}
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w", "b"], ["g"], name="gemm", transB=1),
             helper.make_node("Relu", ["g"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="gemm2", transB=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    src = tmp_path / "fc.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                ir_version=10), src)
    x = rng.standard_normal((8, 3, 4, 4)).astype(np.float32)
    result = quantize_keep_fp16(src, tmp_path / "q.onnx", {"x": x}, ["gemm", "relu"])
    converted = mrvl_convert.convert(result.model, tmp_path / "out")
    places = {n["name"]: n for n in converted.report["nodes"]}
    assert places["gemm"]["rule"] == places["relu"]["rule"] == "mrvl.fc_ni2no"
    assert places["gemm2"]["rule"] == "mrvl.qnn_fc_ni2no"
    assert len(converted.manifest["stages"]) == 1
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", feeds(x[:3]))
    kinds = [(r.layer_name, r.dtype) for r in analysis.rows]
    assert kinds[1:4] == [("FC", "float32"), ("quant", "int8"), ("FC", "int8")], kinds
    assert analysis.first_below is None


def test_keep_fp16_names_unnamed_nodes_as_the_converter_does(tmp_path):
    """Nodes without names get the converter's names (report.json's), which --keep-fp16 takes;
    naming them changes no value (onnxruntime on both quantized models: equal outputs)."""
    src = tmp_path / "m.onnx"
    onnx.save(three_convs(outlier=False, names=False), src)
    calibration = {"x": samples(8, 1)}
    result = quantize_keep_fp16(src, tmp_path / "kept.onnx", calibration, [])
    plain = quantize_int8(src, tmp_path / "plain.onnx", calibration)
    x = samples(1, 3)
    run = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
           for p in (result.model, plain)]
    np.testing.assert_array_equal(run[0], run[1])
    result = quantize_keep_fp16(src, tmp_path / "kept2.onnx", calibration, ["Conv_1"])
    assert any(n.op_type == "Conv" and n.input[1] == "w2"
               for n in onnx.load(str(result.model)).graph.node)  # Conv_1 keeps its float weight


def test_keep_fp16_unknown_node_is_an_option_error(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(three_convs(outlier=False), src)
    with pytest.raises(mrvl_convert.OptionError, match="no_such_conv"):
        quantize_keep_fp16(src, tmp_path / "q.onnx", {"x": samples(4, 1)}, ["no_such_conv"])


# ------------------------------------------------------------------------------------- CLI
def test_cli_keep_fp16_auto_and_quant_analysis_json(tmp_path, capsys):
    from mrvl_convert.cli.convert import main

    src = tmp_path / "bad.onnx"
    onnx.save(three_convs(outlier=True), src)
    np.savez(tmp_path / "cal.npz", x=samples(16, 1))
    code = main([str(src), "-o", str(tmp_path / "out"), "--quantize", "int8", "--calibration",
                 str(tmp_path / "cal.npz"), "--keep-fp16", "auto", "--quant-analysis",
                 "--calibration-method", "percentile"])
    printed = capsys.readouterr().out
    assert code == 0
    # The QDQ model converted is kept, with what it kept in float and how it was calibrated.
    manifest = json.loads((tmp_path / "out" / "bad" / "manifest.json").read_text())
    section = manifest["quantization"]
    assert section["keep_fp16"] == ["conv1"] and section["method"] == "percentile"
    kept = onnx.load(str(tmp_path / "out" / "bad" / section["file"]))
    producer = {out: n.op_type for n in kept.graph.node for out in n.output}
    [conv1] = [n for n in kept.graph.node if n.name == "conv1"]
    conv2 = next(n for n in kept.graph.node if n.op_type == "Conv" and n.name != "conv1")
    assert producer.get(conv1.input[1]) != "DequantizeLinear"  # float weights: kept
    assert producer.get(conv2.input[1]) == "DequantizeLinear"  # the others: int8
    assert "kept in fp16: conv1\n" in printed and "quantization analysis of bad" in printed
    doc = json.loads((tmp_path / "out" / "bad" / "quant_analysis.json").read_text())
    conv1 = next(r for r in doc["rows"] if "conv1" in r["op_nodes"])
    assert conv1["dtype"] == "float32" and conv1["isolated_snr_db"] > THRESHOLD
    assert doc["threshold_db"] == THRESHOLD and doc["samples"] == 8
    # Written through a temp file renamed into the published artifact: none left behind.
    assert not [p for p in (tmp_path / "out" / "bad").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("extra, words", [
    (["--keep-fp16", "auto"], "--keep-fp16 is only used with --quantize"),
    (["--snr-threshold", "30"], "--snr-threshold is only used with --quant-analysis"),
])
def test_cli_analysis_options_need_quantize(tmp_path, capsys, extra, words):
    from mrvl_convert.cli.convert import main

    src = tmp_path / "m.onnx"
    onnx.save(three_convs(outlier=False), src)
    code = main([str(src), "-o", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and "\n" not in err, err
    assert not (tmp_path / "out").exists()


def test_mrvl_verify_quant_analysis(bad, tmp_path, capsys):
    from mrvl_convert.cli.verify import main

    src, _, test, _, tmp = bad
    np.savez(tmp_path / "in.npz", x=np.concatenate([f["x"] for f in test]))
    code = main([str(src), str(tmp / "out"), "--quant-analysis", "--inputs",
                 str(tmp_path / "in.npz"), "--json", str(tmp_path / "qa.json")])
    printed = capsys.readouterr().out
    assert code == 0 and "isol. SNR dB" in printed and "(Conv2D conv1," in printed
    doc = json.loads((tmp_path / "qa.json").read_text())
    assert doc["below_isolated"] == [doc["first_below"]]


def test_keep_fp16_refuses_external_data_outside_the_model_directory(tmp_path):
    """The named copy reads external data as the converter does: never from outside the
    model's directory (a hostile model's ``../`` location)."""
    model = three_convs(outlier=False)
    weight = next(t for t in model.graph.initializer if t.name == "w1")
    weight.ClearField("raw_data")
    weight.data_location = onnx.TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "../outside.bin"
    (tmp_path / "outside.bin").write_bytes(bytes(8 * 3 * 3 * 3 * 4))
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "m.onnx")
    with pytest.raises(mrvl_convert.MrvlConvertError, match="w1"):
        quantize_keep_fp16(tmp_path / "m" / "m.onnx", tmp_path / "q.onnx",
                           {"x": samples(4, 1)}, ["conv2"])


def test_analysis_of_a_model_the_artifact_was_not_made_from_names_the_input(bad, tmp_path):
    *_, tmp = bad
    other = three_convs(outlier=False)
    other.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 9
    other.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 9
    onnx.save(other, tmp_path / "other.onnx")
    with pytest.raises(mrvl_convert.ShapeError, match="x"):
        mrvl_convert.analyze_quantization(tmp_path / "other.onnx", tmp / "out")


def test_fp16_overflow_in_a_kept_layer_is_reported_not_raised(tmp_path):
    """An input past float16's range reaching an fp16 layer: the analysis records the range
    event and writes strict JSON (no NaN or infinity)."""
    src = tmp_path / "m.onnx"
    onnx.save(three_convs(outlier=False), src)
    result = quantize_keep_fp16(src, tmp_path / "q.onnx", {"x": samples(8, 1)}, ["conv1"])
    mrvl_convert.convert(result.model, tmp_path / "out")
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out",
                                                 {"x": samples(1, 2) * 1e6})
    assert analysis.range_events and "fp16 range" in analysis.format_table()
    assert analysis.row_for("conv1").snr_db == -math.inf
    doc = json.loads(json.dumps(analysis.to_dict(), allow_nan=False))
    assert doc["rows"][0]["snr_db"] is None and doc["rows"][0]["exact"] is False


def test_layers_of_every_mrvl_stage_are_analysed(bad, tmp_path):
    """conv2 denied: Mrvl, CPU, Mrvl stages; the second Mrvl stage's layers take their fp32
    reference from the float model's tensor at the boundary (r2), so they get both figures."""
    src, _, test, _, tmp = bad
    result = mrvl_convert.convert(tmp / "q.onnx", tmp_path / "out", deny=["conv2"])
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl", "cpu", "mrvl"]
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", test)
    stages = {r.stage for r in analysis.rows}
    assert len(stages) == 2
    assert all(r.snr_db is not None and r.isolated_snr_db is not None for r in analysis.rows)
    assert analysis.row_for("conv2") is None                   # on CPU: no Mrvl layer
    assert analysis.below_isolated == [analysis.row_for("conv1")]
    assert analysis.row_for("conv3").isolated_snr_db > THRESHOLD > analysis.row_for("conv3").snr_db


def test_cli_keep_fp16_unknown_node_is_one_line(tmp_path, capsys):
    from mrvl_convert.cli.convert import main

    src = tmp_path / "m.onnx"
    onnx.save(three_convs(outlier=False), src)
    np.savez(tmp_path / "cal.npz", x=samples(4, 1))
    code = main([str(src), "-o", str(tmp_path / "out"), "--quantize", "int8", "--calibration",
                 str(tmp_path / "cal.npz"), "--keep-fp16", "conv9"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--keep-fp16 conv9" in err and "conv1" in err and "\n" not in err, err


def test_an_int8_stage_input_takes_the_float_tensor_and_its_readers_scale(bad, tmp_path):
    """The region's edges denied: the Mrvl stage takes x_QuantizeLinear_Output (int8). Its
    reference is the float x (quantize_static's naming), its scale conv1's input_scale, so
    conv1 is measured alone too, and equals its accumulated figure (the same int8 input)."""
    src, _, test, _, tmp = bad
    result = mrvl_convert.convert(tmp / "q.onnx", tmp_path / "out",
                                  deny=["x_QuantizeLinear", "y_DequantizeLinear"])
    mrvl = next(s for s in result.manifest["stages"] if s["kind"] == "mrvl")
    assert [(t["tensor"], t["dtype"]) for t in mrvl["inputs"]] == \
        [("x_QuantizeLinear_Output", "int8")]
    analysis = mrvl_convert.analyze_quantization(src, tmp_path / "out", test)
    conv1 = analysis.row_for("conv1")
    assert conv1.isolated_snr_db == pytest.approx(conv1.snr_db, abs=1e-9)
    assert all(r.isolated_snr_db is not None for r in analysis.rows), analysis.format_table()
    assert analysis.below_isolated == [conv1]


def test_keeping_an_add_between_quantized_layers_leaves_it_int8(tmp_path):
    """Why auto picks Conv2D and FC only: an Add excluded from quantization still reads and
    writes tensors its quantized neighbours quantize, so it stays an int8 Sum2D."""
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((4, 4, 3, 3)) * 0.3, "b": np.zeros(4),
             "w2": rng.standard_normal((4, 4, 3, 3)) * 0.3, "b2": np.zeros(4)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("Conv", ["c", "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
             helper.make_node("Add", ["c2", "c"], ["s"], name="add"),
             helper.make_node("GlobalAveragePool", ["s"], ["y"], name="gap")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 1, 1])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    src = tmp_path / "add.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                ir_version=10), src)
    x = rng.standard_normal((8, 4, 8, 8)).astype(np.float32)
    result = quantize_keep_fp16(src, tmp_path / "q.onnx", {"x": x}, ["add"])
    converted = mrvl_convert.convert(result.model, tmp_path / "out")
    places = {n["name"]: n for n in converted.report["nodes"]}
    assert places["add"]["rule"] == "mrvl.qnn_add"


def test_quantization_keeps_named_nodes_in_float_through_the_api(tmp_path):
    """``Quantization(keep_fp16=...)``: names as the converter gives them (here an unnamed
    model's), checked before anything is written; recorded in the manifest."""
    from mrvl_convert.quantize.recipe import Quantization

    model = three_convs(outlier=False, names=False)
    report = mrvl_convert.convert(model, tmp_path / "float").report
    first_conv = next(n["name"] for n in report["nodes"] if n["op_type"] == "Conv")
    quantize = Quantization({"x": samples(8, 2)}, keep_fp16=first_conv)
    result = mrvl_convert.convert(model, tmp_path / "int8", quantize=quantize)
    assert result.manifest["quantization"]["keep_fp16"] == [first_conv]
    with pytest.raises(mrvl_convert.OptionError, match="--keep-fp16 nope: .* no node"):
        mrvl_convert.convert(model, tmp_path / "bad", quantize=Quantization(
            {"x": samples(8, 2)}, keep_fp16=("nope",)))
    assert not (tmp_path / "bad").exists()
