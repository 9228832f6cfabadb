"""A Pad no Conv absorbs as layers the accelerator has (frontend/pad_forms.py), after moving past
the Unsqueeze/Transpose nodes that alone read it (frontend/pad_sinking.py): each form computes on
onnxruntime, bit for bit, what the Pad computes; the converted model is one Mrvl subgraph where
main left the Pad on the CPU; what no form takes stays, with its reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mrvl_convert import HybridSession, convert
from mrvl_convert.core.macs import node_macs
from mrvl_convert.frontend.pad_forms import PadPlan, macs, selection
from support.backend_cases import assert_fp16_close
from support.models import Builder, canonicalized, run_ort


def _padded(shape, pads, mode="constant", value=None, *, opset=13, conv_after=False,
            axes=None):
    """x -> Conv (so the Pad reads an activation the accelerator holds) -> Pad -> [Conv]."""
    b = Builder(seed=0, opset=opset)
    x = b.input("x", shape)
    c = shape[1]
    a = b.op("Relu", [b.conv(x, c, c, k=1)]) if len(shape) == 4 else b.op("Relu", [x])
    inputs = [a, b.const(np.array(pads, np.int64))]
    if value is not None or axes is not None:
        inputs.append(b.const(np.array(value or 0.0, np.float32)) if value is not None else "")
    if axes is not None:
        inputs.append(b.const(np.array(axes, np.int64)))
    y = b.op("Pad", inputs, name="pad", mode=mode)
    if conv_after:
        y = b.conv(y, c + (0 if axes else pads[1] + pads[len(shape) + 1]), 2, k=3)
    return b.model([y])


def _feed(shape, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3, shape))
            .astype(np.float32)}


def _bit_equal(model, shape):
    canonical, proto = canonicalized(model)
    feed = _feed(shape)
    want = next(iter(run_ort(model, feed, optimize=False).values()))
    got = next(iter(run_ort(proto, feed, optimize=False).values()))
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
        float(np.abs(got - want).max())
    return canonical, [n.op_type for n in proto.graph.node]


CASES = [
    # shape, pads, mode, value, the ops the Pad becomes
    ([1, 3, 5, 6], [0, 0, 1, 2, 0, 0, 2, 1], "constant", None, ["Conv"]),
    ([1, 3, 5, 6], [0, 0, 1, 2, 0, 0, 2, 1], "constant", 1.5, ["Conv", "Add"]),
    ([1, 3, 5, 6], [0, 0, 1, 0, 0, 0, 0, 0], "constant", -65504.0, ["Conv", "Add"]),
    ([1, 3, 5, 6], [0, 1, 0, 0, 0, 2, 0, 0], "constant", 0.5, ["Conv"]),
    ([1, 3, 5, 6], [0, 1, 1, 1, 0, 0, 1, 1], "constant", -2.0, ["Conv", "Conv", "Add"]),
    ([1, 3, 5, 6], [0, 0, -1, 2, 0, 0, 1, -2], "constant", None, ["Slice", "Conv"]),
    ([1, 3, 5, 6], [0, 0, -1, 0, 0, 0, 0, -2], "constant", None, ["Slice"]),
    ([1, 3, 5, 6], [0, 0, 2, 2, 0, 0, 2, 2], "reflect", None,
     ["MatMul", "Transpose", "MatMul", "Transpose"]),
    ([1, 3, 5, 6], [0, 0, 0, 3, 0, 0, 0, 1], "edge", None, ["MatMul"]),
    ([1, 3, 5, 6], [0, 0, 4, 0, 0, 0, 1, 0], "edge", None, ["Transpose", "MatMul", "Transpose"]),
    ([1, 3, 5, 6], [0, 0, -1, 1, 0, 0, 3, 0], "reflect", None,
     ["Slice", "MatMul", "Transpose", "MatMul", "Transpose"]),
    ([1, 4, 5, 6], [0, 2, 1, 0, 0, 1, 0, 1], "reflect", None,
     ["Conv", "MatMul", "Transpose", "MatMul", "Transpose"]),
    ([2, 4, 9], [0, 0, 3, 0, 0, 2], "reflect", None, ["Unsqueeze", "MatMul", "Squeeze"]),
    ([2, 4, 9], [0, 0, 3, 0, 0, 2], "constant", 0.25, ["Unsqueeze", "Conv", "Add", "Squeeze"]),
    ([2, 5], [0, 1, 0, 2], "edge", None, ["Unsqueeze", "Conv", "Squeeze"]),
]


@pytest.mark.parametrize("shape,pads,mode,value,forms", CASES)
def test_each_form_is_bit_equal_to_the_pad(shape, pads, mode, value, forms):
    canonical, ops = _bit_equal(_padded(shape, pads, mode, value), shape)
    start = 2 if len(shape) == 4 else 1  # the Conv and Relu before the Pad
    assert ops[start:] == forms, ops
    assert "became" in canonical.rewritten["pad"]
    assert set(canonical.derived.values()) <= {"pad"}


def test_an_axes_input_is_spread_over_every_axis():
    canonical, ops = _bit_equal(_padded([1, 3, 5, 6], [1, -1, 2, 0], "reflect", axes=[3, 2],
                                        opset=18),
                                [1, 3, 5, 6])
    assert ops[2:] == ["Slice", "MatMul"], ops  # H cropped by 1, W padded by (1, 2)


def test_a_zero_pad_before_a_conv_is_left_for_the_conv_to_fold():
    canonical, ops = _bit_equal(_padded([1, 3, 5, 6], [0, 0, 1, 1, 0, 0, 1, 1],
                                        conv_after=True), [1, 3, 5, 6])
    assert ops == ["Conv", "Relu", "Pad", "Conv"]
    assert "pad" not in canonical.rewritten and "pad" not in canonical.kept


def test_a_pad_moves_past_unsqueeze_and_transpose_into_its_conv():
    """madmom's key CNN: [T, F] -> Pad -> Unsqueeze(2) -> Unsqueeze(0) -> Transpose -> Conv."""
    b = Builder(seed=0, opset=13)
    x = b.input("x", [10, 7])
    p = b.op("Pad", [x, b.const(np.array([2, 1, 2, 1], np.int64)),
                     b.const(np.array(0.0, np.float32))], name="pad")
    u = b.op("Unsqueeze", [b.op("Unsqueeze", [p, b.const(np.array([2]))]),
                           b.const(np.array([0]))])
    t = b.op("Transpose", [u], perm=[0, 3, 1, 2])
    model = b.model([b.conv(t, 1, 4, k=3)])
    canonical, ops = _bit_equal(model, [10, 7])
    assert ops == ["Unsqueeze", "Unsqueeze", "Transpose", "Pad", "Conv"], ops
    assert "moved after" in canonical.rewritten["pad"]


@pytest.mark.parametrize("pads,mode,why", [
    ([1, 0, 0, 0, 0, 0, 0, 0], "constant", "batch axis"),
    ([0, 0, 1, 0, 0, 0, 0, 0], "constant-inf", "outside the float16 range"),
    ([0, 0, 5, 0, 0, 0, 0, 0], "reflect", "onnxruntime refuses"),
    ([0, 0, 1, 0, 0, 0, 0, 0], "wrap", "mode 'wrap'"),
])
def test_what_no_form_takes_stays_with_its_reason(pads, mode, why):
    value = float("-inf") if mode == "constant-inf" else None
    canonical, _ = canonicalized(_padded([1, 3, 5, 6], pads, mode.split("-")[0], value,
                                         opset=19))
    assert why in canonical.kept["pad"], canonical.kept


def test_selection_matrices_are_onnxruntimes_index_maps():
    assert selection(4, 2, 1, "reflect").argmax(axis=1).tolist() == [2, 1, 0, 1, 2, 3, 2]
    assert selection(3, 1, 2, "edge").argmax(axis=1).tolist() == [0, 0, 1, 2, 2, 2]
    assert selection(2, 1, 1, "constant").sum(axis=1).tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize("shape,pads,mode", [
    ([1, 3, 5, 6], [0, 1, 1, 1, 0, 0, 1, 1], "constant"),
    ([1, 3, 5, 6], [0, 0, 2, 2, 0, 0, 2, 2], "reflect")])
def test_the_stated_mac_cost_is_what_the_layers_cost(shape, pads, mode):
    canonical, _ = canonicalized(_padded(shape, pads, mode))
    added = [n for n in canonical.graph.nodes
             if n.name == "pad" or canonical.derived.get(n.name) == "pad"]
    cropped = [(0, 0)] * 4
    plan = PadPlan(mode, 0.0, 4, tuple(shape), tuple(cropped),
                   tuple(zip(pads[:4], pads[4:])))
    assert sum(node_macs(n) for n in added) == macs(plan) > 0


@pytest.mark.parametrize("shape,pads,mode,value", [
    ([1, 4, 6, 6], [0, 0, 2, 2, 0, 0, 2, 2], "reflect", None),
    ([1, 4, 6, 6], [0, 0, 1, 0, 0, 0, 2, 3], "edge", None),
    ([1, 4, 6, 6], [0, 0, 1, 1, 0, 0, 1, 1], "constant", -1.0),
    ([1, 4, 6, 6], [0, 1, 1, 1, 0, 1, 1, 1], "constant", None),
])
def test_converted_is_one_mrvl_subgraph_where_main_cut_it(tmp_path: Path, shape, pads, mode,
                                                          value):
    """Main: the Pad is a CPU subgraph between two Mrvl ones (or after one)."""
    model = _padded(shape, pads, mode, value, conv_after=True)
    result = convert(model, tmp_path / "a")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0), \
        result.summary
    feed = _feed(shape)
    got = HybridSession(tmp_path / "a").run(None, feed)[0]
    assert_fp16_close(got, next(iter(run_ort(model, feed, optimize=False).values())), mode)


def test_an_axes_input_before_a_conv_is_spread_for_the_conv_to_fold():
    canonical, ops = _bit_equal(_padded([1, 3, 5, 6], [1, 2, 1, 2], "constant", axes=[2, 3],
                                        opset=18, conv_after=True), [1, 3, 5, 6])
    assert ops == ["Conv", "Relu", "Pad", "Conv"]
    pad = next(n for n in canonical.graph.nodes if n.name == "pad")
    assert len([t for t in pad.inputs if t.name]) == 2  # no axes input: the rule folds it


def test_a_zero_pad_of_a_graph_input_before_a_reshape_is_on_the_accelerator(tmp_path: Path):
    """openwakeword's embedding model: Keras ZeroPadding2D of the NHWC input [1, 76, 32, 1],
    a Reshape to NCHW, then the Conv. Main: 1 Mrvl + 1 CPU subgraph ("Pad goes to the
    accelerator only fused into a composite ... here it reads a graph input")."""
    b = Builder(seed=3, opset=13)
    x = b.input("x", [1, 12, 8, 1])
    p = b.op("Pad", [x, b.const(np.array([0, 0, 1, 0, 0, 0, 1, 0], np.int64))], name="pad")
    r = b.op("Reshape", [p, b.const(np.array([1, 1, 12, 10], np.int64))])
    model = b.model([b.op("Relu", [b.conv(r, 1, 4, k=3)])])
    result = convert(model, tmp_path / "a")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0), \
        result.summary
    feed = {"x": np.random.default_rng(0).standard_normal((1, 12, 8, 1)).astype(np.float32)}
    got = HybridSession(tmp_path / "a").run(None, feed)[0]
    assert_fp16_close(got, next(iter(run_ort(model, feed, optimize=False).values())), "pad")


def test_a_minus_inf_pad_folds_into_the_maxpool_reading_it(tmp_path: Path):
    """Pad(-inf) -> MaxPool (a 'same' max pool written out): MaxPool's own padding. Main: the
    Pad on the CPU between two Mrvl subgraphs; a Conv + Add form would need -inf as an fp16
    constant, which the accelerator's constants refuse."""
    b = Builder(seed=2, opset=13)
    x = b.input("x", [1, 3, 8, 8])
    a = b.op("Relu", [b.conv(x, 3, 4, k=3, pads=[1, 1, 1, 1])])
    p = b.op("Pad", [a, b.const(np.array([0, 0, 1, 0, 0, 0, 1, 1], np.int64)),
                     b.const(np.array(-np.inf, np.float32))], name="pad")
    y = b.op("MaxPool", [p], name="pool", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 0, 0])
    model = b.model([b.conv(y, 4, 2, k=1)])
    canonical, ops = _bit_equal(model, [1, 3, 8, 8])
    assert "Pad" not in ops and canonical.merged["pad"] == "pool"
    result = convert(model, tmp_path / "a")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    feed = _feed([1, 3, 8, 8])
    got = HybridSession(tmp_path / "a").run(None, feed)[0]
    assert_fp16_close(got, next(iter(run_ort(model, feed, optimize=False).values())), "pool")
