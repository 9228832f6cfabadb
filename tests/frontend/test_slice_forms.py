"""A Slice with a negative step as a positive-step Slice and 0/1 selection layers
(frontend/slice_forms.py): each form computes on onnxruntime, bit for bit, what the Slice
computes; between two Convs the model is one Mrvl subgraph where main cut it ("steps [-1] are
not all positive"); inside a decided If's branch too, a rewritten Slice or Pad is data movement,
not compute that makes a region worth the accelerator (convert's light set)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert import convert
from mrvl_convert.frontend.slice_forms import onnx_indices
from support.models import Builder, canonicalized, run_ort
from support.whole_mrvl import assert_whole_mrvl

BIG = 2 ** 63 - 1


def _sliced(shape, starts, ends, axes, steps, *, conv_around=False):
    """x -> Relu (an activation) -> Slice -> [Conv]; with ``conv_around`` a Conv before too."""
    b = Builder(seed=0, opset=13)
    x = b.input("x", shape)
    a = b.op("Relu", [b.conv(x, shape[1], shape[1], k=1) if conv_around else x])
    y = b.op("Slice", [a] + [b.const(np.array(v, np.int64)) for v in (starts, ends, axes,
                                                                         steps)], name="slice")
    if conv_around:
        c = shape[1] if 1 not in axes else len(onnx_indices(shape[1], starts[axes.index(1)],
                                                            ends[axes.index(1)],
                                                            steps[axes.index(1)]))
        y = b.conv(y, c, 2, k=1)
    return b.model([y])


def _feed(shape, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3, shape))
            .astype(np.float32)}


CASES = [
    # shape, starts, ends, axes, steps, the ops the Slice becomes
    ([1, 1, 1, 3], [-1], [-BIG], [3], [-1], ["MatMul"]),  # silero VAD's reflection
    ([1, 2, 3, 8], [-2], [0], [3], [-1], ["Slice", "MatMul"]),
    ([1, 2, 3, 9], [BIG], [-BIG], [3], [-3], ["Slice", "MatMul"]),
    ([1, 4, 3, 5], [3], [-BIG], [1], [-1], ["Conv"]),
    ([1, 2, 6, 5], [4, 1], [0, 4], [2, 3], [-2, 1], ["Slice", "Transpose", "MatMul", "Transpose"]),
    ([1, 4, 3, 5], [2, -1], [0, -BIG], [1, 3], [-1, -2],
     ["Slice", "Conv", "MatMul"]),
    ([2, 3, 7], [5], [1], [2], [-1], ["Slice", "MatMul"]),
    ([3, 7], [-1], [-BIG], [0], [-1], ["Transpose", "MatMul", "Transpose"]),
    ([1, 2, 1, 5], [0], [-BIG], [2], [-1], ["Slice"]),  # one element: a copy
]


@pytest.mark.parametrize("shape,starts,ends,axes,steps,forms", CASES)
def test_each_form_is_bit_equal_to_the_slice(shape, starts, ends, axes, steps, forms):
    model = _sliced(shape, starts, ends, axes, steps)
    canonical, proto = canonicalized(model)
    feed = _feed(shape)
    want = next(iter(run_ort(model, feed, optimize=False).values()))
    got = next(iter(run_ort(proto, feed, optimize=False).values()))
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    ops = [n.op_type for n in proto.graph.node]
    assert [op for op in ops if op not in ("Relu", "Unsqueeze", "Squeeze")] == forms, ops
    assert "became" in canonical.rewritten["slice"]
    mine = [n for n in canonical.graph.nodes if canonical.derived.get(n.name) == "slice"
            and n.op not in ("Unsqueeze", "Squeeze")]  # a rank lift's view
    assert len(mine) == len(forms) - 1, canonical.derived  # the Slice's node is the first


@pytest.mark.parametrize("size,start,end,step", [
    (5, -1, -BIG, -1), (5, BIG, -BIG, -2), (5, 3, 1, -1), (5, -2, -7, -1), (5, 0, 3, 2),
    (4, 10, 0, -1), (4, -10, 2, 1)])
def test_indices_are_onnxruntimes(size, start, end, step):
    b = Builder(seed=0, opset=13)
    x = b.input("x", [size])
    y = b.op("Slice", [x] + [b.const(np.array([v], np.int64)) for v in (start, end, 0, step)])
    feed = {"x": np.arange(size, dtype=np.float32)}
    got = next(iter(run_ort(b.model([y]), feed, optimize=False).values()))
    assert onnx_indices(size, start, end, step).tolist() == got.astype(int).tolist()


def test_a_positive_slice_is_left_alone():
    canonical, _ = canonicalized(_sliced([1, 2, 3, 8], [1], [5], [3], [2]))
    assert "slice" not in canonical.rewritten and "slice" not in canonical.kept


def test_steps_computed_at_run_time_stay_with_the_reason():
    b = Builder(seed=0, opset=13)
    x = b.input("x", [1, 2, 3, 4])
    s = b.input("s", [1], dtype=TensorProto.INT64)
    y = b.op("Slice", [b.op("Relu", [x]), b.const(np.array([-1])), b.const(np.array([-BIG])),
                       b.const(np.array([3])), s], name="slice")
    model = b.model([y], shapes={y: [1, 2, 3, 4]})
    canonical, _ = canonicalized(model)
    assert "computed at run time" in canonical.kept["slice"], canonical.kept


@pytest.mark.parametrize("axes,starts,steps", [([3], [-1], [-1]), ([1], [-1], [-1]),
                                               ([2], [-1], [-2])])
def test_between_convs_is_one_mrvl_subgraph_where_main_cut_it(tmp_path: Path, axes, starts,
                                                              steps):
    """Main: 'mrvl.strided_slice: steps [-1] are not all positive', the Slice a CPU subgraph
    between two Mrvl ones."""
    model = _sliced([1, 4, 5, 6], starts, [-BIG], axes, steps, conv_around=True)
    assert_whole_mrvl(model, tmp_path / "a", _feed([1, 4, 5, 6]), "slice")


def _branch_model(middle: str) -> onnx.ModelProto:
    """``If(sr == 16000)``, both branches: Conv -> Log -> reversed Slice or reflect Pad -> Log
    -> Conv (silero VAD's If on the sample rate, its reflections between CPU ops)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for v, n in (
        ([-1], "starts"), ([-BIG], "ends"), ([3], "axes"), ([-1], "steps"), (16000, "rate"),
        ([0, 0, 0, 2, 0, 0, 0, 1], "pads"))]
    width = 5 if middle == "slice" else 8

    def branch(tag):
        return helper.make_graph([
            helper.make_node("Conv", ["x", "w1"], [f"c_{tag}"], name=f"conv1_{tag}"),
            helper.make_node("Relu", [f"c_{tag}"], [f"r_{tag}"], name=f"relu_{tag}"),
            helper.make_node("Log", [f"r_{tag}"], [f"l_{tag}"], name=f"log1_{tag}"),
            helper.make_node("Slice", [f"l_{tag}", "starts", "ends", "axes", "steps"],
                             [f"s_{tag}"], name=f"slice_{tag}") if middle == "slice" else
            helper.make_node("Pad", [f"l_{tag}", "pads"], [f"s_{tag}"], name=f"pad_{tag}",
                             mode="reflect"),
            helper.make_node("Log", [f"s_{tag}"], [f"m_{tag}"], name=f"log2_{tag}"),
            helper.make_node("Conv", [f"m_{tag}", "w2"], [f"y_{tag}"], name=f"conv2_{tag}")],
            tag, [], [helper.make_tensor_value_info(f"y_{tag}", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("Equal", ["sr", "rate"], ["is_16k"], name="equal"),
         helper.make_node("If", ["is_16k"], ["y"], name="if_rate",
                          then_branch=branch("a"), else_branch=branch("b"))], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 5]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, width])],
        [w1, w2] + consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("middle", ["slice", "pad"])
def test_a_rewritten_slice_or_pad_in_a_decided_branch_is_no_compute(tmp_path: Path, middle):
    """The selection MatMuls between two Logs are no reason for a Mrvl subgraph of their own.
    Main had no op type for a branch's nodes, so convert's light set missed them: the reflect
    Pad's MatMul was a Mrvl subgraph between the Logs (3 Mrvl + 2 CPU), as silero VAD's reflect
    Pad counted as compute."""
    result = convert(_branch_model(middle), tmp_path / "a", values={"sr": 16000})
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (2, 1), \
        result.summary
