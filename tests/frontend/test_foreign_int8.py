"""Issue 45 finding 5: QDQ models from other quantizers (onnxruntime's quantize_static with
per-channel int8 weights and uint8 activations, or per-tensor uint8) ran 0% of their MACs on
the accelerator, status ok, no line. ``frontend/foreign_int8.py`` requantizes them to the
device's per-tensor symmetric int8 (or runs them in fp16, ``--foreign-int8 fp16``), with its
cost measured against the given model (``frontend/foreign_cost.py``)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import mrvl_convert
from mrvl_convert.cli.convert import main
from mrvl_convert.errors import OptionError
from support.foreign_qdq import foreign_quantized, resnet_like, samples


@pytest.fixture(scope="module")
def per_channel() -> onnx.ModelProto:
    return foreign_quantized(resnet_like(), per_channel=True, activation="QUInt8")


@pytest.fixture(scope="module")
def per_tensor_uint8() -> onnx.ModelProto:
    return foreign_quantized(resnet_like(seed=1), per_channel=False, activation="QUInt8")


def bring_foreign_int8(model: onnx.ModelProto, mode: str = "requantize"):
    # imported here: the conversion tests above run (and fail) on code without the pass
    from mrvl_convert.frontend.foreign_int8 import bring_foreign_int8 as bring
    return bring(model, mode)


def _run(model: onnx.ModelProto, feeds) -> list:
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return [session.run(None, feed)[0] for feed in feeds]


def _weights(model: onnx.ModelProto) -> dict:
    """Each weight DequantizeLinear's output as onnxruntime computes it, by its output name."""
    inits = {i.name for i in model.graph.initializer}
    nodes = [n for n in model.graph.node
             if n.op_type == "DequantizeLinear" and n.input[0] in inits]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n.output[0])
                              for n in nodes)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [n.output[0] for n in nodes]
    feed = samples(model, 1)[0]
    return dict(zip(names, session.run(names, feed)))


@pytest.mark.parametrize("which", ["per_channel", "per_tensor_uint8"])
def test_a_foreign_qdq_cnn_runs_int8_on_the_accelerator(which, request, tmp_path) -> None:
    model = request.getfixturevalue(which)
    result = mrvl_convert.convert(model, tmp_path / "out")
    assert result.summary["mrvl_mac_share"] >= 0.9
    assert result.report["precision"]["shares"]["int8"] >= 0.9
    section = result.report["foreign_int8"]
    assert section["mode"] == "requantize" and section["activations"] > 0
    assert "uint8 activations" in section["kinds"]
    assert ("per-channel weights" in section["kinds"]) == (which == "per_channel")
    assert "requantize, the default" in section["line"] and "cost against the given" in section["line"]
    # what it costs at the output, measured: a small CNN keeps its output's direction
    worst = max(section["cost"]["outputs"].values(), key=lambda o: o["rel"])
    assert worst["cosine"] > 0.995 and worst["rel"] < 0.1


def test_fp16_runs_the_foreign_model_as_its_float_form(per_channel, tmp_path) -> None:
    result = mrvl_convert.convert(per_channel, tmp_path / "out", foreign_int8="fp16")
    assert result.report["precision"]["shares"]["fp16"] >= 0.9
    assert result.report["foreign_int8"]["mode"] == "fp16"
    assert result.manifest["options"]["foreign_int8"] == "fp16"
    with pytest.raises(OptionError):
        mrvl_convert.convert(per_channel, tmp_path / "bad", foreign_int8="int4")


def test_requantized_weights_move_by_at_most_half_a_step(per_channel) -> None:
    """The pass's bound: each weight moves by at most half of its new per-tensor step,
    max|w| / 254, against the given model's dequantized weight (both by onnxruntime)."""
    rewritten, done = bring_foreign_int8(per_channel, "requantize")
    assert done.weights > 0 and not done.left
    given, new = _weights(per_channel), _weights(rewritten)
    checked = 0
    for name, w in given.items():
        if w.dtype != np.float32 or name not in new or w.ndim < 2:  # biases: int32 products
            continue
        step = np.abs(w).max() / 127
        assert np.abs(new[name] - w).max() <= step / 2 * (1 + 1e-6) + 1e-12, name
        checked += 1
    assert checked >= 5
    scales = [numpy_helper.to_array(i) for i in rewritten.graph.initializer
              if i.name.endswith("_scale_s8")]
    assert scales and all(s.size == 1 for s in scales)


def test_before_and_after_on_onnxruntime(per_channel) -> None:
    """The rewritten model against the given one on onnxruntime: the measured cost is what an
    independent run finds, and it is small for this CNN (not exact: requantization)."""
    rewritten, _ = bring_foreign_int8(per_channel, "requantize")
    feeds = samples(per_channel, 4, seed=3)
    before, after = _run(per_channel, feeds), _run(rewritten, feeds)
    ref, got = np.concatenate(before).ravel(), np.concatenate(after).ravel()
    rel = np.abs(ref - got).max() / np.abs(ref).max()
    cosine = ref @ got / np.linalg.norm(ref) / np.linalg.norm(got)
    assert 0 < rel < 0.1 and cosine > 0.999
    from mrvl_convert.frontend.foreign_cost import measure
    cost = measure(per_channel, rewritten, feeds)["outputs"]
    (figures,) = cost.values()
    assert figures["rel"] == pytest.approx(rel) and figures["cosine"] == pytest.approx(cosine)


def test_the_implicit_relu_of_a_uint8_range_is_kept(per_tensor_uint8) -> None:
    """quantize_static drops a Relu whose output range starts at 0 (the uint8 clamp does it);
    symmetric int8 would let negatives through, so the clamp comes back as a Relu."""
    assert not any(n.op_type == "Relu" for n in per_tensor_uint8.graph.node)
    rewritten, _ = bring_foreign_int8(per_tensor_uint8, "requantize")
    assert any(n.op_type == "Relu" for n in rewritten.graph.node)
    as_float, _ = bring_foreign_int8(per_tensor_uint8, "fp16")
    assert any(n.op_type == "Relu" for n in as_float.graph.node)
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear")
                   for n in as_float.graph.node)


def test_fp16_weights_are_onnxruntimes_dequantization_bit_for_bit(per_channel) -> None:
    as_float, _ = bring_foreign_int8(per_channel, "fp16")
    inits = {i.name: numpy_helper.to_array(i) for i in as_float.graph.initializer}
    given = _weights(per_channel)
    assert given and all(np.array_equal(inits[name], w) for name, w in given.items())


def test_own_recipe_models_are_left_alone() -> None:
    symmetric = foreign_quantized(resnet_like(), per_channel=False, activation="QInt8")
    # quantize_static's QInt8 activations are asymmetric unless ActivationSymmetric: foreign
    assert bring_foreign_int8(symmetric)[1] is not None
    float_model = resnet_like()
    assert bring_foreign_int8(float_model) == (float_model, None)


def test_the_cli_prints_the_line(per_channel, tmp_path, capsys) -> None:
    path = tmp_path / "pc.onnx"
    onnx.save(per_channel, path)
    assert main([str(path), "-o", str(tmp_path / "out"), "-j", "1", "-q"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "another quantizer" in line]
    assert len(lines) == 1
    assert "requantized to per-tensor symmetric int8" in lines[0]
    assert "cost against the given QDQ model: max |diff|" in lines[0]
    assert "100.0% of the MACs run on the accelerator" in lines[0]


def _embedding(moved: bool) -> onnx.ModelProto:
    """ids -> Gather of a uint8 table -> DequantizeLinear (and, ``moved``, also a Transpose of
    the quantized Gather -> DequantizeLinear), as quantize_static writes an embedding."""
    from onnx import TensorProto, helper
    table = np.random.default_rng(0).integers(0, 256, (50, 8)).astype(np.uint8)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["g"], name="gather", axis=0),
             helper.make_node("DequantizeLinear", ["g", "s", "z"], ["y"], name="dq")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8])]
    if moved:
        nodes += [helper.make_node("Transpose", ["g"], ["t"], name="move", perm=[1, 0, 2]),
                  helper.make_node("DequantizeLinear", ["t", "s", "z"], ["y2"], name="dq2")]
        outputs.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [6, 1, 8]))
    graph = helper.make_graph(
        nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])],
        outputs, [numpy_helper.from_array(table, "table"),
                  numpy_helper.from_array(np.array(0.0173, np.float32), "s"),
                  numpy_helper.from_array(np.array(131, np.uint8), "z")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("moved", [False, True])
@pytest.mark.parametrize("mode", ["requantize", "fp16"])
def test_a_dequantized_embedding_becomes_a_float_gather_exactly(moved, mode) -> None:
    """quantize_static writes an embedding table as a uint8 constant read by a Gather and
    dequantized after it, there and after a Transpose (text2tashkeel's BiLSTM); the pass
    gathers from the dequantized table instead: onnxruntime gives the same values, bit for
    bit, and no DequantizeLinear is left."""
    model = _embedding(moved)
    rewritten, done = bring_foreign_int8(model, mode)
    assert done.weights == 1 and not done.left
    assert not any(n.op_type == "DequantizeLinear" for n in rewritten.graph.node)
    rng = np.random.default_rng(1)
    feeds = [{"ids": rng.integers(0, 50, (1, 6)).astype(np.int64)} for _ in range(3)]
    sessions = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
                for m in (model, rewritten)]
    for feed in feeds:
        before, after = (session.run(None, feed) for session in sessions)
        assert all(np.array_equal(x, y) for x, y in zip(before, after))


def test_dynamic_int8_matmuls_run_as_float_matmuls(tmp_path) -> None:
    """Dynamic quantization (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the
    run-time scale) has no scale the device can hold and no Marvell layer: it ran on CPU.
    Each chain becomes MatMul(x, dequantized weight), on the accelerator in fp16, the line says
    so, and its cost is measured against the given model."""
    from onnxruntime.quantization import quantize_dynamic
    from support.models import Builder
    b = Builder(0)
    x = b.input("x", [1, 16])
    y = b.op("Relu", [b.matmul_add(x, 16, 32)])
    src, out = tmp_path / "f.onnx", tmp_path / "d.onnx"
    onnx.save(b.model([b.matmul_add(y, 32, 4)]), src)
    quantize_dynamic(str(src), str(out))
    given = onnx.load(str(out))
    assert sum(n.op_type == "MatMulInteger" for n in given.graph.node) == 2
    rewritten, done = bring_foreign_int8(given)
    assert done.dynamic == 2
    assert not any(n.op_type in ("MatMulInteger", "DynamicQuantizeLinear")
                   for n in rewritten.graph.node)
    feeds = samples(given, 4, seed=5)
    ref = np.concatenate(_run(given, feeds)).ravel()
    got = np.concatenate(_run(rewritten, feeds)).ravel()
    assert ref @ got / np.linalg.norm(ref) / np.linalg.norm(got) > 0.999
    result = mrvl_convert.convert(str(out), tmp_path / "art")
    assert "2 dynamic int8 MatMuls" in result.report["foreign_int8"]["line"]
    assert result.summary["mrvl_mac_share"] >= 0.9


def test_operator_form_int8_left_as_it_is_gets_its_line(tmp_path) -> None:
    """An int8 Conv in operator form (QLinearConv, quantize_static's QOperator format) has no
    rewrite here: the line names it, not silence."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from support.models import Builder
    b = Builder(0)
    x = b.input("x", [1, 3, 8, 8])
    src, out = tmp_path / "f.onnx", tmp_path / "d.onnx"
    onnx.save(b.model([b.op("Relu", [b.conv(x, 3, 4)])]), src)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(samples(onnx.load(str(src)), 2, seed=1))

        def get_next(self):
            return next(self.feeds, None)
    # symmetric int8 activations: its Quantize/DequantizeLinear at the edges are not foreign
    quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True})
    result = mrvl_convert.convert(str(out), tmp_path / "art")
    line = result.report["foreign_int8"]["line"]
    assert "operator form (" in line and "QLinearConv x1" in line


def test_nothing_foreign_is_left_after_a_batchnorm_fold() -> None:
    from support.foreign_qdq import conv_bn_net
    qdq = foreign_quantized(conv_bn_net(), per_channel=True, activation="QUInt8")
    rewritten, done = bring_foreign_int8(qdq)
    assert done.batchnorms == 3 and done.left == []
    assert not any(n.op_type == "BatchNormalization" for n in rewritten.graph.node)


@pytest.mark.parametrize("per_channel", [True, False])
def test_batchnorms_between_qdq_pairs_fold_into_their_conv(per_channel, tmp_path) -> None:
    """A BatchNormalization quantize_static leaves between two QDQ pairs after a Conv stayed on
    CPU (no int8 per-channel affine): one cut each. Requantized, it folds into the Conv, one
    Mrvl subgraph; its cost against the given model is measured and small."""
    from support.foreign_qdq import conv_bn_net
    qdq = foreign_quantized(conv_bn_net(), per_channel=per_channel, activation="QUInt8")
    assert sum(n.op_type == "BatchNormalization" for n in qdq.graph.node) == 3
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    section = result.report["foreign_int8"]
    assert section["batchnorms"] == 3 and "3 BatchNormalizations folded" in section["line"]
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    assert result.report["precision"]["shares"]["int8"] >= 0.9
    (figures,) = section["cost"]["outputs"].values()
    assert figures["cosine"] > 0.999
