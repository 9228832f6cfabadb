"""Each canonical rewrite computes on onnxruntime what the original computes: bit for bit,
except Max(x, 0) -> Relu, which may differ only in the sign of a zero."""
from __future__ import annotations

import json

import numpy as np
import onnx_graphsurgeon as gs
import pytest

import mrvl_convert
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import Builder, canonicalized, run_ort

SHAPE = [1, 4, 5, 5]


def _feed(n_inputs=1, seed=0):
    rng = np.random.default_rng(seed)
    # Wide range, both signs, exact zeros of both signs, and non-finite values.
    feeds = {}
    for k in range(n_inputs):
        x = (rng.standard_normal(SHAPE) * 10.0 ** rng.integers(-3, 4, SHAPE)).astype(np.float32)
        flat = x.reshape(-1)
        flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 6.0]
        feeds[f"x{k}"] = x
    return feeds


def _same(model, n_inputs=1, *, signed_zero_may_differ=False):
    canonical, rewritten = canonicalized(model)
    feeds = _feed(n_inputs)
    want = run_ort(model, feeds)
    got = run_ort(rewritten, feeds)
    for name, value in want.items():
        if signed_zero_may_differ:
            np.testing.assert_array_equal(got[name], value)  # equal as numbers, NaN too
        else:
            assert got[name].tobytes() == value.tobytes(), name
    return canonical


def _ops(canonical):
    return sorted(n.op for n in canonical.graph.nodes)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_sum_becomes_add_chain_bit_exact(n):
    b = Builder()
    xs = [b.input(f"x{k}", SHAPE) for k in range(n)]
    y = b.op("Relu", [b.op("Sum", xs, name="sum")], name="relu")
    canonical = _same(b.model([y]), n)
    assert _ops(canonical) == ["Add"] * (n - 1) + ["Relu"]
    assert "Add" in canonical.rewritten["sum"]


def test_sum_order_matters_so_the_test_can_fail():
    """The chain must follow onnxruntime's left-to-right order: another order differs."""
    b = Builder()
    xs = [b.input(f"x{k}", SHAPE) for k in range(5)]
    y = b.op("Sum", xs, name="sum")
    feeds = _feed(5)
    want = run_ort(b.model([y]), feeds)[y]
    reverse = np.float32(0)
    for k in reversed(range(5)):
        reverse = reverse + feeds[f"x{k}"]
    assert reverse.tobytes() != want.tobytes()


@pytest.mark.parametrize("opset", [11, 13])
def test_clip_zero_inf_becomes_relu(opset):
    b = Builder(opset=opset)
    x = b.input("x0", SHAPE)
    y = b.op("Clip", [x, b.const(np.array(0, np.float32)), b.const(np.array(np.inf, np.float32))],
             name="clip")
    canonical = _same(b.model([y]))
    assert _ops(canonical) == ["Relu"]


def test_clip_without_max_stays_and_says_why():
    b = Builder()
    x = b.input("x0", SHAPE)
    y = b.op("Clip", [x, b.const(np.array(0, np.float32))], name="clip")
    canonical = _same(b.model([y]))
    assert _ops(canonical) == ["Clip"] and "+inf" in canonical.kept["clip"]


@pytest.mark.parametrize("zero_first", [False, True])
def test_max_zero_becomes_relu(zero_first):
    b = Builder()
    x = b.input("x0", SHAPE)
    zero = b.const(np.zeros([1, 4, 1, 1], np.float32))
    y = b.op("Max", [zero, x] if zero_first else [x, zero], name="max")
    canonical = _same(b.model([y]), signed_zero_may_differ=True)
    assert _ops(canonical) == ["Relu"]


@pytest.mark.parametrize("opset", [9, 13])
def test_min_relu_six_becomes_one_clip(tmp_path, opset):
    b = Builder(opset=opset)
    x = b.input("x0", SHAPE)
    r = b.op("Relu", [x], name="relu")
    y = b.op("Min", [b.const(np.array(6, np.float32)), r], name="min")
    model = b.model([y])
    canonical = _same(model)
    assert _ops(canonical) == ["Clip"]
    assert canonical.merged == {"relu": "min"}
    if opset >= 11:
        clip = canonical.graph.nodes[0]
        assert [float(t.values) for t in clip.inputs[1:]] == [0.0, 6.0]
    # The merged Relu is still in the report, placed with the Clip.
    result = mrvl_convert.convert(model, tmp_path / "o")
    relu, clip = result.placement("relu"), result.placement("min")
    assert relu["merged_into"] == "min" and relu["stage"] == clip["stage"]
    assert relu["placement"] == clip["placement"]


def test_min_of_shared_relu_is_left():
    b = Builder()
    x = b.input("x0", SHAPE)
    r = b.op("Relu", [x], name="relu")
    y = b.op("Min", [r, b.const(np.array(6, np.float32))], name="min")
    z = b.op("Add", [r, y], name="add")
    canonical = _same(b.model([z]))
    assert _ops(canonical) == ["Add", "Min", "Relu"]


def test_sub_const_becomes_add_bit_exact():
    b = Builder()
    x = b.input("x0", SHAPE)
    c = (np.random.default_rng(1).standard_normal([1, 4, 1, 1])).astype(np.float32)
    c.reshape(-1)[0] = 0.0
    y = b.op("Sub", [x, b.const(c)], name="sub")
    canonical = _same(b.model([y]))
    assert _ops(canonical) == ["Add"]


@pytest.mark.parametrize("const_shape", [[1, 4, 1, 1], [5], []])
def test_const_minus_x_becomes_negate_and_add_bit_exact(const_shape):
    """c - x -> Add(Mul(x, -1), c): every value of the wide feed (signed zeros, infinities)
    bit for bit; a NaN stays a NaN (its sign bit is not specified)."""
    b = Builder()
    x = b.input("x0", SHAPE)
    c = np.random.default_rng(1).standard_normal(const_shape).astype(np.float32)
    c.reshape(-1)[0] = 0.0
    y = b.op("Sub", [b.const(c), x], name="rsub")
    model = b.model([y])
    canonical, rewritten = canonicalized(model)
    assert _ops(canonical) == ["Add", "Mul"]
    assert "Add" in canonical.rewritten["rsub"]
    feeds = _feed()
    want, got = run_ort(model, feeds)[y], run_ort(rewritten, feeds)[y]
    nan = np.isnan(want)
    assert np.array_equal(nan, np.isnan(got))
    assert got[~nan].tobytes() == want[~nan].tobytes()
    assert np.any(want[~nan] == 0) and np.any(np.isinf(want))  # the feed reaches those cases


def test_const_minus_x_that_broadcasts_x_up_stays():
    """A constant larger than x would make the Add's activation smaller than its output."""
    b = Builder()
    x = b.input("x0", [1, 4, 1, 1])
    y = b.op("Sub", [b.const(np.ones(SHAPE, np.float32)), x], name="rsub")
    canonical, _ = canonicalized(b.model([y]))
    assert _ops(canonical) == ["Sub"]


@pytest.mark.parametrize("divisor,becomes", [(4.0, "Mul"), (0.125, "Mul"), (2.0 ** -140, "Div"),
                                             (3.0, "Div"), (6.0, "Div")])
def test_div_const_becomes_mul_only_when_exact(divisor, becomes):
    b = Builder()
    x = b.input("x0", SHAPE)
    y = b.op("Div", [x, b.const(np.array(divisor, np.float32))], name="div")
    canonical = _same(b.model([y]))
    assert _ops(canonical) == [becomes]
    if becomes == "Div":
        assert "not exact" in canonical.kept["div"]


def test_div_by_powers_of_two_per_channel_is_mul():
    b = Builder()
    x = b.input("x0", SHAPE)
    c = np.array([2.0, 0.5, -8.0, 1.0], np.float32).reshape(1, 4, 1, 1)
    canonical = _same(b.model([b.op("Div", [x, b.const(c)], name="div")]))
    assert _ops(canonical) == ["Mul"]


def test_div_by_a_negative_power_of_two_and_signed_zeros():
    b = Builder()
    x = b.input("x0", SHAPE)
    canonical = _same(b.model([b.op("Div", [x, b.const(np.array(-2.0, np.float32))])]))
    assert _ops(canonical) == ["Mul"]


def test_const_minus_between_convs_stays_on_the_accelerator(tmp_path):
    """A YOLO head's anchors - distances between two Convs: on main the Sub (a constant minus
    an activation, which no layer takes) cut the model in three; now one Mrvl stage."""
    b = Builder()
    x = b.input("x", [1, 3, 8, 8])
    y = b.conv(x, 3, 2, pads=[1, 1, 1, 1])
    anchors = np.stack(np.meshgrid(np.arange(8) + 0.5, np.arange(8) + 0.5))[None]
    y = b.op("Sub", [b.const(anchors.astype(np.float32)), y], name="anchors_minus")
    model = b.model([b.conv(y, 2, 4, pads=[1, 1, 1, 1])])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_nodes"]) == (1, 0)
    feed = {"x": np.random.default_rng(0).standard_normal([1, 3, 8, 8]).astype(np.float32)}
    got = mrvl_convert.HybridSession(tmp_path / "o").run(None, feed)[0]
    want = list(run_ort(model, feed).values())[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * max(1.0, np.abs(want).max()))


def test_reshape_to_batch_features_becomes_flatten(tmp_path):
    b = Builder()
    x = b.input("x0", [2, 4, 3, 3])
    y = b.op("Reshape", [x, b.const(np.array([2, -1], np.int64))], name="reshape")
    z = b.op("Reshape", [x, b.const(np.array([4, 18], np.int64))], name="batch_changed")
    model = b.model([y, z])
    canonical = canonicalize(load_model(model))
    ops = {n.name: n.op for n in canonical.graph.nodes}
    assert ops == {"reshape": "Flatten", "batch_changed": "Reshape"}
    _, rewritten = canonicalized(model)
    x_val = np.random.default_rng(0).standard_normal([2, 4, 3, 3]).astype(np.float32)
    want, got = run_ort(model, {"x0": x_val}), run_ort(rewritten, {"x0": x_val})
    assert all(want[k].tobytes() == got[k].tobytes() for k in want)


def test_reshape_before_fc_gets_the_flatten_path(tmp_path):
    """No layout_transform + reshape before the FC: the Flatten's column permutation instead."""
    b = Builder()
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("Relu", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])], name="act")
    y = b.op("Reshape", [y, b.const(np.array([1, 256], np.int64))], name="reshape")
    y = b.gemm(y, 256, 10, transB=1)
    model = b.model([y])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_nodes"] == 0
    nodes = json.loads((tmp_path / "o" / "test_model_mrvl_0-nodes.json").read_text())["nodes"]
    kinds = [n["attrs"]["layer_name"][0] for n in nodes if n["op"] != "input"]
    assert kinds == ["layout_transform", "Conv2D", "nn.batch_flatten", "FC"], kinds
    assert "Flatten" in result.placement("reshape")["canonical"]
    feed = {"x": np.random.default_rng(0).standard_normal([1, 3, 8, 8]).astype(np.float32)}
    got = mrvl_convert.HybridSession(tmp_path / "o").run(None, feed)[0]
    want = list(run_ort(model, feed).values())[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * max(1.0, np.abs(want).max()))


def test_folding_is_quiet_and_restores_graphsurgeon_logger(capfd):
    """Folding a constant subgraph larger than 1 MiB: no warning printed, and graphsurgeon's
    process-wide logger silenced only while we fold (restored after)."""
    severity_before = gs.logger.G_LOGGER.severity
    seen = []
    gs.logger.G_LOGGER.register_callback(seen.append)  # called on every severity change
    seen.clear()
    try:
        _fold_large_constant()
    finally:
        gs.logger.G_LOGGER.logger_callbacks.remove(seen.append)
    assert seen and seen[-1] == severity_before == gs.logger.G_LOGGER.severity
    assert capfd.readouterr().out == ""


def _fold_large_constant() -> None:
    b = Builder()
    x = b.input("x0", [1, 640])
    w = b.op("Mul", [b.weight(640, 640), b.const(np.array(2.0, np.float32))], name="scale_w")
    y = b.op("MatMul", [x, w], name="fc")
    canonical = canonicalize(load_model(b.model([y])))
    assert [n.op for n in canonical.graph.nodes] == ["MatMul"]
    assert "constant folding" in canonical.removed["scale_w"]
