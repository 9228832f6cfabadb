"""Every verify row reports the fp16 floor beside its error: the same reference with every
float tensor rounded to fp16, run by onnxruntime on the same inputs (issue 43, finding 4). A
FAIL within 3x the floor says the model is fp16-sensitive and names ``--keep-fp32 auto``; one
far above it says the converter is at fault and names the first layer over."""
from __future__ import annotations

import json

import onnx
from onnx import numpy_helper

import mrvl_convert
from mrvl_convert.cli.convert import main as convert_main
from mrvl_convert.cli.verify import main as verify_main
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.fp16_floor import floor_model
from support import corpus_dynamo
from support.fp16_sensitive import cancelling_model
from support.int8 import converted_int8
from support.models import small_cnn
from support.planted import plant_wrong_weight


def test_an_fp16_sensitive_model_fails_within_its_floor_and_names_the_remedy(tmp_path, capsys):
    onnx.save(cancelling_model(), str(tmp_path / "cancel.onnx"))
    code = convert_main([str(tmp_path / "cancel.onnx"), "-o", str(tmp_path / "out"),
                         "--verify"])
    assert code == 3
    out = capsys.readouterr().out
    assert "within 3x the fp16 floor: the model is fp16-sensitive" in out
    assert "--keep-fp32 auto" in out
    row = json.loads((tmp_path / "out" / "summary.json").read_text())["models"][0]
    figures = row["verify"]["outputs"][0]
    # rounding the weights 1000.3 to 1000.5 alone costs the output ~0.5 of its peak
    assert figures["fp16_floor"]["max_rel"] > 0.3
    assert figures["max_abs"] <= 3 * figures["fp16_floor"]["max_abs"]


def test_a_wrong_weight_fails_far_above_the_floor_and_names_the_first_layer(tmp_path):
    model = small_cnn()
    mrvl_convert.convert(model, tmp_path / "art")
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    conv = next(n for n in wrong.graph.node if n.op_type == "Conv")
    weight = next(t for t in wrong.graph.initializer if t.name == conv.input[1])
    value = numpy_helper.to_array(weight).copy()
    value[0] *= 2.0  # the artifact's weight is no longer the model's
    weight.CopyFrom(numpy_helper.from_array(value, weight.name))
    report = compare(wrong, tmp_path / "art", layers=True)
    line = report.summary_line()
    assert not report.passed
    assert "far above the fp16 floor" in line and "converter defect" in line
    assert f"the first layer over tolerance is {report.first_layer_over.tensor}" in line
    row = report.judged_rows[0]
    assert 0 < row.floor_max_rel < 0.01 < row.max_rel


def test_mrvl_verify_locates_a_defect_far_above_the_floor_without_layers(tmp_path, capsys):
    """Without --layers, a FAIL far above the floor is run again with the layer rows, so the
    verdict names the first layer over tolerance (the planted Conv's)."""
    onnx.save(small_cnn(), str(tmp_path / "m.onnx"))
    mrvl_convert.convert(str(tmp_path / "m.onnx"), tmp_path / "art")
    plant_wrong_weight(tmp_path / "art", "Conv_8")
    assert verify_main([str(tmp_path / "m.onnx"), str(tmp_path / "art")]) == 3
    out = capsys.readouterr().out
    assert "far above the fp16 floor" in out
    assert "the first layer outside tolerance is Conv_8" in out or \
        "the first layer outside tolerance is relu2" in out


def test_a_passing_fp16_row_carries_its_floor(tmp_path):
    model = small_cnn()
    mrvl_convert.convert(model, tmp_path / "art")
    report = compare(model, tmp_path / "art")
    row = report.judged_rows[0]
    assert report.passed and report.floor_note == ""
    assert 0 < row.floor_max_rel < 0.01 and "fp16 floor" in report.summary_line()


def test_an_int8_row_carries_the_floor_of_its_qdq_model(tmp_path):
    result, qdq = converted_int8(small_cnn(), tmp_path / "art")
    report = compare(qdq, result.out_dir)
    row = report.judged_rows[0]
    assert report.floor_note == "" and row.floor_max_abs is not None and row.floor_max_abs > 0


def test_a_dynamo_bert_floor_runs_with_its_sizes_unrounded(tmp_path):
    """Range, Gather indices and a head split's Concat-ed target stay integers in the floor
    model (``value_tensors.py``): onnxruntime runs it, and its error is fp16's size."""
    model = corpus_dynamo.dynamo_bert()
    feeds = [corpus_dynamo.bert_feeds(s) for s in range(2)]
    mrvl_convert.convert(model, tmp_path / "art", shapes=corpus_dynamo.bert_shapes())
    report = compare(model, tmp_path / "art", feeds)
    assert report.floor_note == "", report.floor_note
    assert all(0 < r.floor_max_rel < 0.05 for r in report.judged_rows)


def test_the_floor_model_rounds_every_float_tensor():
    model = small_cnn()
    rounded = floor_model(model)
    halves = [n for n in rounded.graph.node if n.op_type == "Cast" and
              n.attribute[0].i == onnx.TensorProto.FLOAT16]
    produced = {o for n in model.graph.node for o in n.output}
    assert {h.input[0].removesuffix("__floor32") for h in halves} >= {"x"} | produced
    floats = {t.name for t in model.graph.initializer}
    # every weight read by a rounded copy, every node result leaves through a Cast pair
    read = {i for n in rounded.graph.node for i in n.input}
    assert not floats & read


def test_a_static_qdq_transformer_with_fp16_layers_has_its_floor(tmp_path):
    """A QDQ BERT as onnxruntime's quantize_static writes it: the artifact runs some nodes as
    fp16 layers (verify rounds them in the QDQ reference, renaming their results) and compares
    boundary tensors; the floor model built on that reference runs (it named two Cast pairs
    alike, and rounded an output kept_fp16 had renamed already)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from mrvl_convert.frontend.input_shapes import fix_input_shapes

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([corpus_dynamo.bert_feeds(s) for s in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    model = corpus_dynamo.dynamo_bert()
    fix_input_shapes(model, corpus_dynamo.bert_shapes(), "bert")
    onnx.save(model, str(tmp_path / "bert.onnx"))
    quantize_static(str(tmp_path / "bert.onnx"), str(tmp_path / "qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    mrvl_convert.convert(str(tmp_path / "qdq.onnx"), tmp_path / "art")
    report = compare(str(tmp_path / "qdq.onnx"), tmp_path / "art",
                     [corpus_dynamo.bert_feeds(s) for s in range(2)])
    assert "rounded to fp16" in report.reference  # fp16 layers in the QDQ reference
    assert report.floor_note == "", report.floor_note
    assert all(0 < r.floor_max_rel < 0.1 for r in report.judged_rows)
