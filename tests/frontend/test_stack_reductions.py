"""A reduction over a stacked axis (frontend/stack_reductions.py): attacut's torch.stack + max
of three conv branches is one Mrvl subgraph (before: "mrvl.concat: ... this one is on axis 3",
"mrvl.reduce_max: the input is 4-D, not 3-D"); onnxruntime before and after the pass is
bit-equal for Max and Min and within the module's bound for Sum and Mean; forms that are not a
reduction of a stack are left alone."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.models import Builder, canonicalized, run_ort
from support.strategies.stackreduce import bound, stack_reduce_from_spec, stacked_operands


def _branches(opset: int = 18, reader: bool = False):
    """attacut's middle: Conv1d branches, each [1, L, C] after its Transpose, stacked on a new
    last axis and max-reduced there (keepdims 0), then a MatMul head."""
    b = Builder(opset=opset)
    x = b.input("x", [1, 8, 16])
    stacked = []
    for i, dilation in enumerate((1, 3, 2)):
        y = b.op("Conv", [x, b.weight(6, 8, 3), b.weight(6)], name=f"conv{i}",
                 pads=[dilation, dilation], dilations=[dilation])
        y = b.op("Transpose", [y], name=f"permute{i}", perm=[0, 2, 1])
        stacked.append(b.op("Unsqueeze", [y, b.const(np.array([3], np.int64))],
                            name=f"unsqueeze{i}"))
    joined = b.op("Concat", stacked, name="stack", axis=3)
    pooled = b.op("ReduceMax", [joined, b.const(np.array([-1], np.int64))], name="max",
                  keepdims=0)
    outputs = [b.op("MatMul", [pooled, b.weight(6, 4)], name="head")]
    if reader:
        outputs.append(b.op("Relu", [joined], name="other_reader"))
    return b.model(outputs)


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)


def test_attacuts_stacked_max_is_one_mrvl_subgraph(tmp_path):
    model = _branches()
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert compare(model, tmp_path / "art", [{"x": _x()}]).passed


def test_attacuts_stacked_max_is_bit_equal_and_reads_the_branches():
    model = _branches()
    canonical, proto = canonicalized(model)
    names = {n.name for n in canonical.graph.nodes}
    assert not names & {"stack", "unsqueeze0", "unsqueeze1", "unsqueeze2"}, names
    assert next(n for n in canonical.graph.nodes if n.name == "max").op == "Max"
    assert {canonical.merged[n] for n in ("stack", "unsqueeze0", "unsqueeze2")} == {"max"}
    [want] = run_ort(model, {"x": _x()}, optimize=False).values()
    [got] = run_ort(proto, {"x": _x()}, optimize=False).values()
    assert got.shape == want.shape and np.array_equal(got, want)


def _spec(op: str, keepdims: int, stack: bool, opset: int, negative=(False, True, True)):
    return {"shape": [1, 3, 4], "n": 3, "axis": 1, "op": op, "keepdims": keepdims,
            "stack": stack, "opset": opset, "negative": list(negative), "seed": 7}


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("keepdims,stack", [(0, True), (0, False), (1, True), (1, False)])
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_every_spelling_is_the_chain_within_its_bound(op, keepdims, stack, opset):
    case = stack_reduce_from_spec(_spec(op, keepdims, stack, opset))
    canonical, proto = canonicalized(case.model)
    reduce = next(n for n in canonical.graph.nodes if n.name == "reduce")
    reshaped = not keepdims and not stack
    assert reduce.op == ("Reshape" if reshaped else "Mul" if op == "ReduceMean"
                         else {"ReduceMax": "Max", "ReduceMin": "Min"}.get(op, "Add"))
    [want] = run_ort(case.model, case.feeds, optimize=False).values()
    [got] = run_ort(proto, case.feeds, optimize=False).values()
    assert got.shape == want.shape
    allowed = bound(op, stacked_operands(case.model, case.feeds), 1, keepdims)
    assert np.all(np.abs(got.astype(np.float64) - want) <= allowed)


def test_a_concat_read_by_another_node_is_left_alone():
    canonical, _ = canonicalized(_branches(reader=True))
    assert next(n for n in canonical.graph.nodes if n.name == "max").op == "ReduceMax"


@pytest.mark.parametrize("change", ["other_axis", "wide_parts"])
def test_a_reduction_not_over_the_stacked_size_1_axis_is_left_alone(change):
    b = Builder(opset=18)
    shape = [1, 2, 3, 1] if change == "other_axis" else [1, 2, 3, 2]
    parts = [b.op("Relu", [b.input(f"x{i}", shape)], name=f"relu{i}") for i in range(2)]
    joined = b.op("Concat", parts, name="stack", axis=3)
    axes = [2] if change == "other_axis" else [3]
    reduced = b.op("ReduceMax", [joined, b.const(np.array(axes, np.int64))], name="max",
                   keepdims=1)
    canonical, _ = canonicalized(b.model([reduced]))
    assert next(n for n in canonical.graph.nodes if n.name == "max").op == "ReduceMax"
