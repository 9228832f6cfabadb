"""A GELU whatever QDQ pairs a quantizer put inside it (``rules/float_spans.py``). onnxruntime's
quantize_static puts a pair after every Mul it quantizes: in ``(0.5 * x) * (1 + erf(x / sqrt
2))`` after the half Mul and the gate Mul, each of which has an int8 form of its own, so
``frontend/float_pairs.py`` kept them int8 and the Erf between them was cut off on CPU (main: 2
Mrvl / 1 CPU subgraphs for ``erf:half_first`` and ``erf:half_then_x``; the tanh GELU with its
half Mul first stayed whole as int8 and fp16 pieces, no GELU layer). The composite rules read
the model through its pairs find the span; the pairs inside it are dropped, those at its ends
stay, and the GELU is one fp16 composite between the int8 FCs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.frontend.float_pairs import drop_float_pairs, read_through
from mrvl_convert.rules.float_spans import builtin_float_forms
from mrvl_convert.rules.int8_forms import builtin_int8_op_types
from mrvl_convert.verify.compare import compare
from support.foreign_qdq import foreign_quantized
from support.int8 import converted_int8
from support.onnxref import run_model as run_ort
from support.strategies.gelu8 import gelu_block, token_feeds

RULE = {"erf": "mrvl.gelu_erf", "tanh": "mrvl.gelu_tanh_form"}
CUT_ON_MAIN = ("erf:half_first", "erf:half_then_x", "tanh:half_first")


def _qdq(form: str, activation: str = "QInt8") -> onnx.ModelProto:
    return foreign_quantized(gelu_block(form), per_channel=False, activation=activation,
                             feeds=token_feeds(8, seed=1))


@pytest.mark.parametrize("activation", ["QInt8", "QUInt8"])
@pytest.mark.parametrize("form", CUT_ON_MAIN)
def test_a_gelu_with_pairs_inside_is_one_layer(form, activation, tmp_path) -> None:
    got = mrvl_convert.convert(_qdq(form, activation), tmp_path)
    assert (got.summary["mrvl_subgraphs"], got.summary["cpu_subgraphs"]) == (1, 0), [
        (e["op_type"], e.get("reason")) for e in got.placements if e["placement"] == "cpu"]
    rules = [e.get("rule") for e in got.placements]
    assert rules.count(RULE[form.split(":")[0]]) >= 3, rules  # its Erf/Tanh, Add, gate Mul
    assert [e["name"] for e in got.placements if e.get("rule") == "mrvl.qnn_fc_tokens"
            and e["op_type"] == "MatMul"] == ["front", "back"]
    kept = tmp_path / got.manifest["foreign_int8"]["file"]
    result = compare(kept, tmp_path, token_feeds(3, seed=7), with_floor=False)
    assert result.passed, result.summary_line()
    # the reference rounds the fp16 GELU as the artifact computes it (verify/fp16_chains.py)
    assert all(row.max_abs == 0.0 for row in result.rows if row.kind == "output")


@pytest.mark.parametrize("form", CUT_ON_MAIN)
def test_the_pairs_dropped_are_inside_the_gelu(form) -> None:
    """On the QDQ model alone: no pair is left inside the GELU, both FCs keep their int8
    input and output, and run on onnxruntime the result is no further from the float model
    than the QDQ model given (the roundings dropped are the quantizer's: at most half a step
    each, float_pairs.py's bound)."""
    given = onnx.shape_inference.infer_shapes(_qdq(form))
    after = onnx.ModelProto()
    after.CopyFrom(given)
    assert drop_float_pairs(after, *builtin_float_forms())
    producer = {o: n for n in after.graph.node for o in n.output}
    inside = [n for n in after.graph.node
              if n.op_type not in ("MatMul", "QuantizeLinear", "DequantizeLinear")]
    for node in inside:  # a pair left is the FC's output pair, the GELU's input x
        for dq in [producer.get(i) for i in node.input]:
            if dq is not None and dq.op_type == "DequantizeLinear":
                q = producer[dq.input[0]]
                assert producer[q.input[0]].name == "front", (node.name, q.name)
    for fc in [n for n in after.graph.node if n.op_type == "MatMul"]:
        assert producer[fc.input[0]].op_type == "DequantizeLinear", fc.name
    feeds = token_feeds(4, seed=9)
    twin = gelu_block(form)
    want = [run_ort(twin, f)[0] for f in feeds]
    before = [run_ort(given, f)[0] for f in feeds]
    got = [run_ort(after, f)[0] for f in feeds]
    error = lambda ys: max(float(np.max(np.abs(y - w))) for y, w in zip(ys, want))  # noqa: E731
    assert error(got) <= error(before), (error(got), error(before))
    assert any(not np.array_equal(g, b) for g, b in zip(got, before))


def test_without_spans_the_pairs_inside_stay() -> None:
    """The int8-op neighbourhood rule alone keeps the half Mul's pair (main's behaviour): the
    spans are what drops it."""
    given = onnx.shape_inference.infer_shapes(_qdq("erf:half_first"))
    alone = drop_float_pairs(onnx.ModelProto.FromString(given.SerializeToString()),
                             builtin_int8_op_types())
    spanned = drop_float_pairs(given, *builtin_float_forms())
    assert set(alone) < set(spanned)
    assert any(name.startswith("half_x") for name in set(spanned) - set(alone)), spanned


def test_the_view_reads_through_every_activation_pair() -> None:
    given = onnx.shape_inference.infer_shapes(_qdq("erf:half_first"))
    view = read_through(given)
    ops = [n.op_type for n in view.graph.node]
    assert ops.count("QuantizeLinear") == 1  # the output's pair: a graph output stays
    names = {n.name: n.op_type for n in view.graph.node}
    assert all(given.graph.node[int(k)].op_type == op for k, op in names.items())
    spans = list(builtin_float_forms().spans(given))
    assert [sorted(given.graph.node[int(i)].name for i in s) for s in spans] == [
        sorted(["scale", "erf", "one", "gate"])]


@pytest.mark.parametrize("form", ["erf:div", "erf:mul", "tanh:pow"])
def test_gelus_whole_before_stay_whole(form, tmp_path) -> None:
    got = mrvl_convert.convert(_qdq(form), tmp_path)
    assert (got.summary["mrvl_subgraphs"], got.summary["cpu_subgraphs"]) == (1, 0)
    assert RULE[form.split(":")[0]] in {e.get("rule") for e in got.placements}


@pytest.mark.parametrize("form", CUT_ON_MAIN)
def test_our_recipe_makes_the_gelu_one_layer_bit_equal(form, tmp_path) -> None:
    """Our recipe runs the same pass after quantize_static (``quantize/ort_quantize.py``);
    verify's reference rounds the GELU as the artifact computes it, the tanh form too
    (``verify/fp16_chains.py``: one int8 step off at calibration span 3 before it did)."""
    got, qdq = converted_int8(gelu_block(form), tmp_path / "out", span=3.0)
    assert (got.summary["mrvl_subgraphs"], got.summary["cpu_subgraphs"]) == (1, 0)
    assert RULE[form.split(":")[0]] in {e.get("rule") for e in got.placements}
    result = compare(qdq, got.out_dir, token_feeds(3, seed=7, spread=2.0), with_floor=False)
    assert result.passed and all(r.max_abs == 0.0 for r in result.judged_rows), (
        result.summary_line())
