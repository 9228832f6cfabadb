"""An Einsum as Transpose, Reshape, ReduceSum, MatMul and Mul layers (frontend/einsum_forms.py,
frontend/einsum_equation.py): each form computes on onnxruntime what the Einsum computes,
within the stated bound; what no form takes stays with its reason; a grouped linear between two
Convs converts to one Mrvl subgraph where main cut it at the Einsum."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mrvl_convert.frontend.einsum_equation import read_equation
from support.models import Builder, canonicalized, run_ort
from support.strategies.einsum import EinsumCase, bound, ort_sums_and_moves, within_bound
from support.whole_mrvl import assert_whole_mrvl


CASES = [
    # equation, shapes, constant second operand, the ops the Einsum becomes (a ReduceSum is
    # then a MatMul by ones, token_ops.py)
    ("btgi,gih->btgh", [[1, 5, 4, 6], [4, 6, 3]], True, ["Transpose", "MatMul", "Transpose"]),
    ("bhqd,bhkd->bhqk", [[2, 3, 4, 5], [2, 3, 6, 5]], False, ["Transpose", "MatMul"]),
    ("bhqk,bhkd->bhqd", [[2, 3, 4, 6], [2, 3, 6, 5]], False, ["MatMul"]),
    ("bld,dhk->blhk", [[2, 7, 8], [8, 3, 4]], True, ["MatMul", "Reshape"]),
    ("blhk,dhk->bld", [[2, 7, 3, 4], [8, 3, 4]], True, ["Reshape", "MatMul"]),
    ("ij->ji", [[3, 4]], False, ["Transpose"]),
    pytest.param("ijk->ki", [[3, 4, 5]], False,
                 ["Transpose", "MatMul", "Transpose", "Squeeze", "Transpose"],
                 marks=pytest.mark.skipif(not ort_sums_and_moves(), reason=(
                     "this onnxruntime's Einsum (1.18) fails on one operand summed and "
                     "reordered: no original to compare with"))),
    ("ij,ij->ij", [[3, 4], [3, 4]], False, ["Mul"]),
    ("i,j->ij", [[3], [4]], False, ["Reshape", "Mul"]),
    ("...ij,...jk->...ik", [[2, 3, 4], [2, 4, 5]], False, ["MatMul"]),
    ("abc,cd", [[2, 3, 4], [4, 5]], True, ["MatMul"]),
    ("abc,bd->da", [[2, 3, 4], [3, 5]], False, ["MatMul", "Squeeze", "MatMul", "Transpose"]),
]


@pytest.mark.parametrize("equation,shapes,const_b,forms", CASES)
def test_each_form_computes_the_einsum_within_its_bound(equation, shapes, const_b, forms):
    case = EinsumCase(equation, tuple(map(tuple, shapes)), const_b, seed=3)
    canonical, ops = within_bound(case)
    assert ops == forms, ops
    assert "became" in canonical.rewritten["einsum"]
    origins = {canonical.derived.get(origin, origin) for origin in canonical.derived.values()}
    assert origins <= {"einsum"}, canonical.derived  # a later pass's layers derive from ours


@pytest.mark.parametrize("equation,shapes,why", [
    ("ii->i", [[3, 3]], "repeats a letter"),
    ("ij,jk->ik", [[3, 1], [4, 5]], "a broadcast"),
    ("IJ", [[3, 4]], "upper-case"),
    ("ij->ij", [[3, 4]], "moves nothing"),
])
def test_what_no_form_takes_stays_with_its_reason(equation, shapes, why):
    b = Builder(seed=0, opset=17)
    names = [b.input(f"x{k}", s) for k, s in enumerate(shapes)]
    if equation == "ij,jk->ik":  # onnx's shape inference refuses the mismatch: give it
        model = b.model([b.op("Einsum", names, name="einsum", equation=equation)],
                        shapes={"einsum_out": [3, 5]})
    else:
        model = b.model([b.op("Einsum", names, name="einsum", equation=equation)])
    canonical, _ = canonicalized(model)
    assert why in canonical.kept["einsum"], canonical.kept


def test_a_weight_first_is_made_the_second_operand():
    """``gih,btgi->btgh``: the same layers as ``btgi,gih->btgh`` (a BatchMatmul takes a
    constant second operand only)."""
    b = Builder(seed=4, opset=17)
    x = b.input("x0", [1, 5, 4, 6])
    w = np.random.default_rng(5).standard_normal((4, 6, 3)).astype(np.float32)
    model = b.model([b.op("Einsum", [b.const(w), x], name="einsum", equation="gih,btgi->btgh")])
    canonical, proto = canonicalized(model)
    assert [n.op_type for n in proto.graph.node] == ["Transpose", "MatMul", "Transpose"]
    feed = EinsumCase("btgi,gih->btgh", ((1, 5, 4, 6), (4, 6, 3)), True, seed=4).feed()
    want = next(iter(run_ort(model, feed, optimize=False).values()))
    got = next(iter(run_ort(proto, feed, optimize=False).values()))
    limit = bound("btgi,gih->btgh", [feed["x0"], w], ((1, 5, 4, 6), (4, 6, 3)))
    assert (np.abs(got.astype(np.float64) - want) <= limit).all()


def test_three_operands_are_refused():
    assert "one or two" in read_equation("ij,jk,kl->il", [[2, 3], [3, 4], [4, 5]])


def test_an_ellipsis_broadcast_right_aligned_spells_fresh_letters():
    eq = read_equation("...ij,...jk->...ik", [[2, 3, 4, 5], [3, 5, 6]])
    assert eq.inputs == ("01ij", "1jk") and eq.output == "01ik"


def test_opset_12_sums_with_an_axes_attribute():
    _, ops = within_bound(EinsumCase("abc,bd->da", ((2, 3, 4), (3, 5)), False, seed=1),
                          opset=12)
    assert ops == ["MatMul", "Squeeze", "MatMul", "Transpose"], ops


def _grouped_linear(equation: str = "btgi,gih->btgh"):
    """Conv -> tokens [1, H W, g, i] -> Einsum (grouped linear) -> back to NCHW -> Conv."""
    b = Builder(seed=0, opset=17)
    x = b.input("x", [1, 8, 4, 6])
    a = b.op("Relu", [b.conv(x, 8, 8, k=3, pads=[1, 1, 1, 1])])
    t = b.op("Transpose", [a], perm=[0, 2, 3, 1])
    r = b.op("Reshape", [t, b.const(np.array([1, 24, 2, 4], np.int64))])
    e = b.op("Einsum", [r, b.weight(2, 4, 3)], name="einsum", equation=equation)
    r2 = b.op("Reshape", [e, b.const(np.array([1, 4, 6, 6], np.int64))])
    t2 = b.op("Transpose", [r2], perm=[0, 3, 1, 2])
    return b.model([b.conv(t2, 6, 4, k=3, pads=[1, 1, 1, 1])])


def test_a_grouped_linear_between_convs_is_one_mrvl_subgraph(tmp_path: Path):
    """deepfilternet's enc: ``btgi,gih->btgh``. Main: 2 Mrvl + 1 CPU subgraph (no rule handles
    op type Einsum)."""
    feed = {"x": np.random.default_rng(0).standard_normal((1, 8, 4, 6)).astype(np.float32)}
    assert_whole_mrvl(_grouped_linear(), tmp_path / "a", feed, "einsum")


def _dequantized_einsum(quantized_weight: bool = False):
    """x -> QuantizeLinear -> DequantizeLinear -> Einsum ``btgi,gih->btgh`` by a float weight
    (onnxruntime's quantize_static quantizes no Einsum), or by a quantized one."""
    b = Builder(seed=0, opset=17)
    x = b.input("x", [1, 5, 4, 6])
    scale, zero = b.const(np.array(0.05, np.float32)), b.const(np.array(0, np.int8))
    q = b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, scale, zero]), scale, zero])
    w = np.random.default_rng(1).standard_normal((4, 6, 3)).astype(np.float32)
    weight = b.const(w)
    if quantized_weight:
        weight = b.op("DequantizeLinear", [b.const(np.rint(w / 0.05).astype(np.int8)), scale,
                                           zero])
    model = b.model([b.op("Einsum", [q, weight], name="einsum", equation="btgi,gih->btgh")])
    return model, w


def test_an_einsum_in_an_int8_region_is_rewritten_within_its_bound():
    """deepfilternet's int8 enc: its grouped linears between QDQ pairs stayed on the CPU ("it is
    in an int8 (QDQ) region"); they are the fp16 layers of the float form there (verify's
    reference rewrites them alike, recurrent_reference.py)."""
    model, w = _dequantized_einsum()
    canonical, proto = canonicalized(model)
    assert "became" in canonical.rewritten["einsum"], canonical.kept
    assert "Einsum" not in [n.op_type for n in proto.graph.node]
    feed = {"x": np.random.default_rng(2).uniform(-6, 6, (1, 5, 4, 6)).astype(np.float32)}
    want = next(iter(run_ort(model, feed, optimize=False).values()))
    got = next(iter(run_ort(proto, feed, optimize=False).values()))
    dequantized = np.clip(np.rint(feed["x"] / np.float32(0.05)), -128, 127) * np.float32(0.05)
    limit = bound("btgi,gih->btgh", [dequantized.astype(np.float32), w],
                  ((1, 5, 4, 6), (4, 6, 3)))
    assert (np.abs(got.astype(np.float64) - want) <= limit).all()


def test_an_einsum_of_a_quantized_weight_stays():
    """A weight another quantizer quantized has no int8 form here: the Einsum stays, said so."""
    model, _ = _dequantized_einsum(quantized_weight=True)
    canonical, _ = canonicalized(model)
    assert "quantized constant" in canonical.kept["einsum"], canonical.kept
