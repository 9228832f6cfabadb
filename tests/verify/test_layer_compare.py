"""compare(..., layers=True) and mrvl-verify --layers: every Mrvl layer compared with the tensor of
the original model it computes, to find the first layer where fp16 loses accuracy."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert import HybridSession, convert
from mrvl_convert.cli import verify_main
from mrvl_convert.verify.compare import compare
from support.models import mrvl_cpu_mrvl_model, small_cnn


def lossy_model(*, named: bool = True) -> onnx.ModelProto:
    """x -> (conv_a: x * (1 + 2**-12)) + (conv_b: -x) -> conv_out (x 1).

    In fp32 the Add gives x * 2**-12. In fp16 the weight 1 + 2**-12 rounds to 1 (float16 keeps
    10 fraction bits), so the Add gives exactly 0: each conv is within a float16 step of fp32,
    the Add is 100% off, and so is everything after it."""
    inits = [numpy_helper.from_array(np.full((4, 4, 1, 1), 0, np.float32) +
                                     np.eye(4, dtype=np.float32)[:, :, None, None] * w, name)
             for name, w in (("wa", 1 + 2.0 ** -12), ("wb", -1.0), ("wo", 1.0))]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
             helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Conv", ["s", "wo"], ["y"], name="conv_out")]
    if not named:
        for node in nodes:
            node.name = ""
    graph = helper.make_graph(
        nodes, "lossy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def layer_rows(comparison):
    return [row for row in comparison.rows if row.kind == "layer"]


def test_every_layer_of_a_mrvl_cpu_mrvl_model_is_compared_in_run_order(tmp_path):
    """Both Mrvl stages' layers get a row (boundary tensors and outputs keep theirs), the NHWC
    layers are turned back to NCHW before comparing (a wrong transpose would break cosine),
    and the verdict is the one without layers."""
    model = mrvl_cpu_mrvl_model()
    convert(model, str(tmp_path / "multi"), policy="multi")
    plain = compare(model, str(tmp_path / "multi"), samples=2)
    with_layers = compare(model, str(tmp_path / "multi"), samples=2, layers=True)
    assert [row.tensor for row in layer_rows(with_layers)] == ["r1", "r2", "f"]
    assert [row.tensor for row in with_layers.rows if row.kind != "layer"] == \
        [row.tensor for row in plain.rows]
    assert [row.tensor for row in with_layers.judged_rows] == ["logits"]   # outputs only
    for row in layer_rows(with_layers):
        assert row.passed and row.max_rel < 2e-3 and row.cosine > 0.99999, row
        assert row.top1 is None  # a hidden layer is not a classifier
    assert "(Conv2D, stage " in layer_rows(with_layers)[0].note
    assert with_layers.passed == plain.passed is True
    assert with_layers.first_layer_over is None
    assert "every compared layer is within tolerance" in with_layers.format_table()


@pytest.mark.parametrize("keras_transpose", [False, True])
def test_a_flatten_is_compared_in_the_models_element_order(tmp_path, keras_transpose):
    """The Mrvl flatten reshapes NHWC data as it is. The model flattens NCHW data, or (Keras
    style) NHWC data after a Transpose the converter absorbed: either way the flatten's row is
    compared in the model's order, and within tolerance."""
    model = small_cnn(keras_transpose=keras_transpose)
    convert(model, str(tmp_path / "cnn"))
    result = compare(model, str(tmp_path / "cnn"), samples=2, layers=True)
    [flatten] = [row for row in layer_rows(result) if "nn.batch_flatten" in row.note]
    assert flatten.passed and flatten.cosine > 0.99999 and flatten.max_rel < 2e-3, flatten
    assert result.first_layer_over is None and result.passed


@pytest.mark.parametrize("named", [True, False])
def test_the_first_layer_outside_tolerance_is_the_lossy_one(tmp_path, named):
    """The Add is the first layer row over tolerance, the convs before it are within it; with
    unnamed nodes too (compare names them as the converter does)."""
    model = lossy_model(named=named)
    convert(model, str(tmp_path / "lossy"))
    result = compare(model, str(tmp_path / "lossy"), layers=True)
    rows = {row.tensor: row for row in layer_rows(result)}
    assert set(rows) == {"a", "b", "s"}
    assert rows["a"].passed and rows["b"].passed
    assert rows["a"].max_rel < 1e-3
    assert not rows["s"].passed and rows["s"].max_rel == pytest.approx(1.0)
    assert result.first_layer_over is rows["s"]
    assert "(Sum2D, stage" in rows["s"].note
    assert not result.passed  # the output is wrong too: the verdict says so, as without layers
    table = result.format_table()
    assert "the first layer outside tolerance is s (Mrvl layer" in table
    assert " over " in next(line for line in table.splitlines() if line.startswith("s "))


def test_a_layer_that_overflows_float16_is_the_first_over(tmp_path):
    """x * 100 * 1000 passes 65504 for |x| > 0.66: the second conv's row says inf/NaN, and it
    is the first row over tolerance."""
    def eye(scale: float) -> np.ndarray:
        return np.eye(4, dtype=np.float32)[:, :, None, None] * np.float32(scale)

    inits = [numpy_helper.from_array(eye(100.0), "w0"), numpy_helper.from_array(eye(1e3), "w1"),
             numpy_helper.from_array(eye(1e-3), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0"),
             helper.make_node("Conv", ["c0", "w1"], ["c1"], name="conv1"),
             helper.make_node("Conv", ["c1", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(
        nodes, "overflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    convert(model, str(tmp_path / "overflow"))
    result = compare(model, str(tmp_path / "overflow"), layers=True)
    rows = {row.tensor: row for row in layer_rows(result)}
    assert rows["c0"].passed
    assert not rows["c1"].passed and "inf/NaN" in rows["c1"].note
    assert result.first_layer_over is rows["c1"]
    assert result.range_events and not result.passed


def test_a_layer_over_tolerance_does_not_fail_the_run(tmp_path):
    """Layer rows are diagnostics: an override that no layer could meet changes the layer's
    row, not the verdict of the boundary tensors and outputs."""
    model = mrvl_cpu_mrvl_model()
    convert(model, str(tmp_path / "multi"), policy="multi")
    strict = {"overrides": {"r2": {"max_rel": 0.0, "reason": "test: no error allowed"}}}
    result = compare(model, str(tmp_path / "multi"), layers=True, tolerances=strict)
    assert result.first_layer_over.tensor == "r2"
    assert result.to_dict()["first_layer_over"] == "r2"
    assert result.passed
    assert result.summary_line().startswith("PASS")


def test_run_layers_gives_every_layer_once_and_the_same_tensors_as_run(tmp_path):
    model = mrvl_cpu_mrvl_model()
    convert(model, str(tmp_path / "multi"), policy="multi")
    session = HybridSession(str(tmp_path / "multi"))
    x = np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)
    _, env = session.run(None, {"x": x}, capture=True)
    traced_env, layers = session.run_layers({"x": x})
    mrvl = [s for s in session.stages if s.kind == "mrvl"]
    assert [(t.stage, t.spec.name) for t in layers] == \
        [(s.name, spec.name) for s in mrvl for spec in s.runner.layers]
    assert set(traced_env) == set(env)
    for name in env:
        np.testing.assert_array_equal(traced_env[name], env[name])
    for out in layers:
        assert tuple(out.value.shape) == tuple(out.spec.shape)


def test_verify_cli_layers_flag(tmp_path, capsys):
    model = lossy_model()
    onnx.save(model, str(tmp_path / "lossy.onnx"))
    convert(model, str(tmp_path / "lossy"))
    def layer_lines(out: str) -> list:
        return [line for line in out.splitlines() if line.split()[1:2] == ["layer"]]

    assert verify_main([str(tmp_path / "lossy.onnx"), str(tmp_path / "lossy")]) == 3
    assert layer_lines(capsys.readouterr().out) == []
    # The exit status is the verdict's: the output is wrong, so 3 (verify failed) with or
    # without --layers.
    assert verify_main([str(tmp_path / "lossy.onnx"), str(tmp_path / "lossy"), "--layers"]) == 3
    out = capsys.readouterr().out
    assert "the first layer outside tolerance is s" in out
    assert [line.split()[0] for line in layer_lines(out)] == ["a", "b", "s"]
