"""The ONNX backend node cases of the newer layer set's ops (issue 17), per op, on the accelerator.

Each case is converted with ``min_compute_layers=0``, so upstream's rule "a region without a Conv
or FC layer stays on CPU" does not hide it. Then, per node of the case's issue-17 ops: either
it landed on Mrvl and the hybrid matches the case's expected outputs within the fp16 tolerance,
or it stayed on CPU with a reason that names a real constraint (a rule's near miss, or no rule),
never the compute rule. Two variants: the case as shipped, and ``const_operands``: every input
but the first becomes an initializer with the case's own values (a Clip's bounds, a Pow's
exponent, a ConvTranspose's weight are constants in exported models).
"""
from __future__ import annotations

import collections
import functools
import os
from typing import Dict, List, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from mrvl_convert import HybridSession, convert
from support.backend_cases import (OPS, all_node_cases, assert_fp16_close, at_least_min_opset,
                                   float32, nearest)
from support.onnxref import run_model

pytestmark = pytest.mark.system

# The ops issue 17 added to the catalogue (as ONNX spells them).
NEW_OPS = frozenset({
    "Sigmoid", "Tanh", "LeakyRelu", "Clip", "Softmax", "Pow", "Mul", "Sub", "Div", "HardSigmoid",
    "HardSwish", "Resize", "Upsample", "Split", "Slice", "ReduceMean", "ReduceMax",
    "ConvTranspose", "Unsqueeze", "Sqrt", "Reciprocal", "PRelu", "ArgMax", "TopK"})
# Cases whose inputs fp16 cannot hold: the accelerator sees other numbers than the case.
# test_softmax_large_number: 10001..10003 are 10000, 10000, 10008 in fp16 (spacing 8 there).
INPUT_NOT_IN_FP16 = frozenset({"test_softmax_large_number"})
COMPUTE_RULE = "compute-heavy"


@functools.lru_cache(maxsize=1)
def new_op_cases() -> Dict[str, object]:
    """Backend node cases made of supported ops, with at least one issue-17 op, a float32 first
    input, float32 outputs and no zero-size input (other inputs: any type; they become
    constants in one variant)."""
    def empty(model) -> bool:
        # A zero-size input: the loader refuses it (nothing to run on any device).
        return any(d.HasField("dim_value") and d.dim_value == 0 for i in model.graph.input
                   for d in i.type.tensor_type.shape.dim)

    selected = {}
    for case in all_node_cases():
        if case.kind != "node" or case.model is None:
            continue
        ops = {n.op_type for n in case.model.graph.node}
        if (ops <= OPS | NEW_OPS and ops & NEW_OPS and float32(case.model.graph.input[:1])
                and float32(case.model.graph.output) and nearest(case.model)
                and not empty(case.model)):
            selected[case.name] = at_least_min_opset(case)
    return selected


def _variant(case, variant: str) -> Tuple[onnx.ModelProto, List[Dict[str, np.ndarray]]]:
    names = [i.name for i in case.model.graph.input]
    if variant == "as_is":
        return case.model, [dict(zip(names, inputs)) for inputs, _ in case.data_sets]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    first = dict(zip(names, case.data_sets[0][0]))
    for value_info in list(model.graph.input)[1:]:
        model.graph.initializer.append(numpy_helper.from_array(first[value_info.name],
                                                               value_info.name))
        model.graph.input.remove(value_info)
    return model, [{names[0]: inputs[0]} for inputs, _ in case.data_sets]


def _float_inputs_only(case) -> bool:
    return all(i.type.tensor_type.elem_type == TensorProto.FLOAT for i in case.model.graph.input)


def _params() -> List[Tuple[str, str]]:
    params = []
    for name, case in sorted(new_op_cases().items()):
        if _float_inputs_only(case):
            params.append((name, "as_is"))
        if len(case.model.graph.input) > 1:
            params.append((name, "const_operands"))
    return params


# The default run converts one case per op that reaches Mrvl (those below), and the first case
# of every other op; all cases run with -m slow (about 160 conversions, minutes on 2 cores).
REACHES_MRVL = {
    "Clip": ("test_clip_default_max", "const_operands"),
    "ConvTranspose": ("test_convtranspose_group_2", "const_operands"),
    "LeakyRelu": ("test_leakyrelu", "as_is"),
    "ReduceMax": ("test_reduce_max_keepdims_example", "const_operands"),
    "Resize": ("test_resize_upsample_scales_nearest", "as_is"),
    "Sigmoid": ("test_sigmoid", "as_is"),
    "Softmax": ("test_softmax_example", "as_is"),
    "Split": ("test_split_equal_parts_2d", "as_is"),
    "Sub": ("test_sub", "const_operands"),
    "Tanh": ("test_tanh", "as_is"),
    "Unsqueeze": ("test_unsqueeze_axis_1", "const_operands"),
    "Upsample": ("test_upsample_nearest", "as_is"),
}


def _default_params() -> List[Tuple[str, str]]:
    chosen = set(REACHES_MRVL.values())
    seen = {op for op in REACHES_MRVL}
    for name, variant in _params():
        ops = {n.op_type for n in new_op_cases()[name].model.graph.node} & NEW_OPS
        if ops - seen:
            chosen.add((name, variant))
            seen |= ops
    return [p for p in _params() if p in chosen]


def _marked_params():
    default = set(_default_params())
    return [pytest.param(*p, marks=() if p in default else pytest.mark.slow) for p in _params()]


@functools.lru_cache(maxsize=None)
def _convert(name: str, variant: str, out_root: str):
    model, feeds = _variant(new_op_cases()[name], variant)
    out_dir = os.path.join(out_root, f"{name}-{variant}")
    result = convert(model, out_dir, min_compute_layers=0)
    placed = [(n["name"], n["op_type"], n["placement"], n.get("reason", ""))
              for n in result.report["nodes"] if n["op_type"] in NEW_OPS]
    return out_dir, model, feeds, placed


@pytest.fixture(scope="module")
def out_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("new_op_cases"))


@pytest.mark.parametrize("name,variant", _marked_params())
def test_new_op_case_on_mrvl_or_cpu_for_a_real_constraint(name, variant, out_root):
    case = new_op_cases()[name]
    out_dir, model, feeds, placed = _convert(name, variant, out_root)
    assert placed, "the case has an issue-17 op node"
    for node, op, placement, reason in placed:
        if placement == "cpu":
            assert reason and COMPUTE_RULE not in reason, f"{node} ({op}): {reason!r}"
    if not any(p[2] == "mrvl" for p in placed):
        return
    session = HybridSession(out_dir, threads=1)
    for feed, (_, expected) in zip(feeds, case.data_sets):
        got = session.run(None, feed)
        if name in INPUT_NOT_IN_FP16:
            expected = _expected_from_fp16_inputs(model, feed, expected)
        for k, (g, w) in enumerate(zip(got, expected)):
            assert_fp16_close(g, w, f"{name} [{variant}] output {k}")


def _expected_from_fp16_inputs(model, feed, expected):
    """onnxruntime on the inputs rounded to fp16; asserts first that the rounding alone takes
    the case's expected outputs out of tolerance (else the case needs no exception)."""
    rounded = {k: v.astype(np.float16).astype(np.float32) for k, v in feed.items()}
    reference = run_model(model, rounded)
    with pytest.raises(AssertionError):
        for r, w in zip(reference, expected):
            assert_fp16_close(r, w, "fp16-rounded inputs vs the case")
    return reference


def _reached(params, out_root):
    reached, total = collections.Counter(), collections.Counter()
    for name, variant in params:
        placed = _convert(name, variant, out_root)[3]
        for op in {p[1] for p in placed}:
            total[op] += 1
            reached[op] += any(p[1] == op and p[2] == "mrvl" for p in placed)
    return reached, total


def test_each_reaching_case_lands_its_op_on_mrvl(out_root):
    """The default run's representatives do what they represent (min_compute_layers=0)."""
    present = {op: case for op, case in REACHES_MRVL.items() if case[0] in new_op_cases()}
    assert len(present) >= len(REACHES_MRVL) - 2, "older onnx ships fewer cases, not this few"
    for op, (name, variant) in present.items():
        placed = _convert(name, variant, out_root)[3]
        assert any(p[1] == op and p[2] == "mrvl" for p in placed), (op, name, variant, placed)


@pytest.mark.slow
def test_new_op_cases_per_op_reach_mrvl(out_root):
    """Counts per op of the cases whose op node lands on Mrvl; the floor is what the layer set
    can take from these cases (the rest are 1-D, batch 3, 3-D Softmax... see the reasons)."""
    reached, total = _reached(_params(), out_root)
    print("\nbackend cases per op (case variants on Mrvl / converted): " +
          ", ".join(f"{op} {reached[op]}/{total[op]}" for op in sorted(total)))
    for op in ("Sigmoid", "Tanh", "LeakyRelu", "Clip", "Softmax", "Sub", "Resize", "Upsample",
               "Split", "ConvTranspose"):
        assert reached[op] >= 1, f"no {op} case reaches Mrvl"
