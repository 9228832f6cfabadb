"""GELU on layer set marvell (issue 27): the codegen has no GELU or Erf layer, so
layers/gelu.py lowers the Erf form torch exports and the opset-20 Gelu op to the tanh
approximation, written with 0.5 * (1 + tanh(u)) = sigmoid(2u) as five layers: Mul2D(x, x),
Mul2D, Sum2D, Mul2D(x, .) with sigmoid fused, Mul2D(x, .) (CreateCompositeMrvlMulLayer,
CreateCompositeMrvlSumLayer and setActivationFunction of
princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc).

Bound: |gelu_erf - gelu_tanh| <= TANH_APPROXIMATION_BOUND over the reals (checked here on a
dense float64 grid), plus fp16 rounding: the chain rounds five times; with an fp16 input the
gate g = sigmoid(v) is off by at most about 2U (U = 2**-11: its own rounding, plus the three
roundings of v's factor s damped by |v| g (1 - g) <= 0.23), and the last product adds U of
|y| <= |x|: within FP16_SLACK * U * |x| with FP16_SLACK = 4.
"""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import mrvl_convert
from mrvl_convert.layers.gelu import TANH_APPROXIMATION_BOUND
from mrvl_convert.runtime import Fp16RangeWarning, HybridSession
from support.layer_chains import layer_kinds
from support.models import Builder, run_ort
from support.onnxref import U, fp16_round
from support.transformer_ops import gelu_erf, gelu_tanh, token_front

FP16_SLACK = 4.0
SHAPE = [1, 48, 64]
GELU_KINDS = ["Mul2D", "Mul2D", "Sum2D", "Mul2D", "Mul2D"]
_erf = np.frompyfunc(math.erf, 1, 1)


def _exact(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def _tanh_form(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def test_the_tanh_approximation_bound_holds_on_a_dense_grid():
    """Step 1e-5 over [-12, 12] (the largest gap, 4.7324e-4, is near |x| = 2.7) and coarser
    out to +-1000, where both forms are x or 0 to float64 precision."""
    for grid in (np.linspace(-12, 12, 2_400_001), np.linspace(-1000, 1000, 200_001)):
        gap = np.abs(_exact(grid) - _tanh_form(grid))
        assert gap.max() <= TANH_APPROXIMATION_BOUND
    near = np.linspace(2.6, 2.8, 20_001)
    assert np.abs(_exact(near) - _tanh_form(near)).max() > 0.99 * TANH_APPROXIMATION_BOUND


def _feed(wide=(-96, -60, -30, -20, -12, -10, -6, -5, 5, 6, 10, 12, 20, 30, 60, 96.0)
          ) -> np.ndarray:
    """Dense over [-8, 8], then ``wide`` (by default out to +-96: the sigmoid's argument stays
    in fp16's range to |x| 97)."""
    dense = np.linspace(-8.0, 8.0, int(np.prod(SHAPE)) - len(wide))
    return fp16_round(np.concatenate([dense, np.array(wide)]).reshape(SHAPE))


def _model(form: str):
    b = Builder(opset=20 if form.startswith("Gelu") else 13)
    x = token_front(b, SHAPE)
    if form.startswith("Gelu"):
        y = b.op("Gelu", [x], name="gelu", approximate=form.split(":")[1])
    elif form.startswith("tanh"):
        y = gelu_tanh(b, x, cube=form.split(":")[1])
    else:
        y = gelu_erf(b, x, form)
    return b.model([y])


def _run(model, tmp_path):
    result = mrvl_convert.convert(model, tmp_path / "o")
    x = _feed()
    with warnings.catch_warnings():
        warnings.simplefilter("error", Fp16RangeWarning)
        [got] = HybridSession(result.out_dir, threads=1).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    return result, x, got.astype(np.float64), want.astype(np.float64)


ERF_FORMS = {"div": "gate", "mul": "gate", "half_first": "gate", "half_then_x": "half",
             "Gelu:none": "gelu"}


@pytest.mark.parametrize("form", sorted(ERF_FORMS))
def test_exact_gelu_runs_within_the_bound_of_onnxruntime(tmp_path, form):
    """The Erf forms and Gelu(approximate=none): one region, the five layers, and the hybrid
    within TANH_APPROXIMATION_BOUND + FP16_SLACK * U * |x| of onnxruntime's exact GELU."""
    model = _model(form)
    result, x, got, want = _run(model, tmp_path)
    assert result.summary["cpu_nodes"] == 0 and result.summary["mrvl_subgraphs"] == 1
    # half_first: the model's own Mul(x, 0.5) is a Mul2D of its own, which the chain reads
    own = ["Mul2D"] if form == "half_first" else []
    assert sorted(layer_kinds(result)[1:]) == sorted(GELU_KINDS + own)
    err = np.abs(got - want)
    assert np.all(err <= TANH_APPROXIMATION_BOUND + FP16_SLACK * U * np.abs(x)), err.max()
    # the bound is used: fp16 alone would not explain the gap near |x| = 2.7
    assert err.max() > 0.5 * TANH_APPROXIMATION_BOUND
    entry = result.placement(ERF_FORMS[form])
    assert "tanh approximation" in entry["note"] and "4.74e-4" in entry["note"]
    assert mrvl_convert.compare(model, result.out_dir).passed


def test_gelu_tanh_op_computes_its_own_formula_to_fp16(tmp_path):
    model = _model("Gelu:tanh")
    result, x, got, want = _run(model, tmp_path)
    assert result.placement("gelu")["rule"] == "mrvl.gelu_tanh"
    assert "fp16 rounding only" in result.placement("gelu")["note"]
    assert np.all(np.abs(got - _tanh_form(x)) <= FP16_SLACK * U * np.abs(x))
    assert np.all(np.abs(got - want) <= FP16_SLACK * U * np.abs(x))
    assert mrvl_convert.compare(model, result.out_dir).passed


@pytest.mark.parametrize("cube", ["pow", "mul"])
def test_the_tanh_form_is_one_composite_in_fp16_range(tmp_path, cube):
    """x**3 as Pow 3 or x * x * x, Mul 0.044715, Add x, Mul sqrt(2/pi), Tanh, Add 1, Mul x,
    Mul 0.5: the five layers (the model's x * x reused), within fp16 rounding of the formula
    and of onnxruntime on the model, with no intermediate out of range up to |x| = 96 (x**3
    alone overflows past 40)."""
    model = _model(f"tanh:{cube}")
    result, x, got, want = _run(model, tmp_path)
    assert result.summary["cpu_nodes"] == 0 and result.summary["mrvl_subgraphs"] == 1
    assert sorted(layer_kinds(result)[1:]) == sorted(GELU_KINDS)
    assert result.placement("gate")["rule"] == "mrvl.gelu_tanh_form"
    assert "fp16 rounding only" in result.placement("cube")["note"]
    assert np.all(np.abs(got - _tanh_form(x)) <= FP16_SLACK * U * np.abs(x))
    assert np.all(np.abs(got - want) <= FP16_SLACK * U * np.abs(x))
    assert mrvl_convert.compare(model, result.out_dir).passed


def test_a_lone_erf_stays_on_cpu_and_says_why(tmp_path):
    b = Builder()
    x = token_front(b, [1, 8, 16])
    y = b.op("Erf", [b.op("Div", [x, b.const(np.float32(math.sqrt(2)))], name="scale")],
             name="erf")
    result = mrvl_convert.convert(b.model([b.op("Relu", [y])]), tmp_path / "o")
    entry = result.placement("erf")
    assert entry["placement"] == "cpu"
    assert "mrvl.gelu_erf" in entry["reason"]


@pytest.mark.parametrize("change,reason", [
    ("divisor", "a GELU's erf form"),
    ("half", "not by the missing 0.5"),
])
def test_a_near_gelu_is_not_taken_for_one(tmp_path, change, reason):
    """Div by 1.5 instead of sqrt 2, or Mul 0.25 instead of 0.5: not GELU, no approximation."""
    b = Builder()
    x = token_front(b, [1, 8, 16])
    scaled = b.op("Div", [x, b.const(np.float32(1.5 if change == "divisor" else math.sqrt(2)))],
                  name="scale")
    gate = b.op("Add", [b.op("Erf", [scaled], name="erf"), b.const(np.float32(1.0))], name="one")
    y = b.op("Mul", [b.op("Mul", [x, gate], name="gate"),
                     b.const(np.float32(0.25 if change == "half" else 0.5))], name="half")
    result = mrvl_convert.convert(b.model([y]), tmp_path / "o")
    assert result.placement("erf")["placement"] == "cpu"
    assert reason in json.dumps(result.report)
    assert all(e.get("rule") != "mrvl.gelu_erf" for e in result.report["nodes"])


def _gelu_layers(result):
    doc = json.loads(next(p for p in result.files if p.name.endswith("-nodes.json")).read_text())
    return [n["attrs"] for n in doc["nodes"] if n["op"] == "tvm_op"][1:]


def test_gelu_chain_attributes_are_the_codegen_writers(tmp_path):
    """Golden: each layer as its codegen function writes a 3-D token tensor (R4 [1, T, C, 1],
    resizeInputOutputLayoutTo4dim): CreateCompositeMrvlMulLayer (data_layout_shape_<i> per
    activation, a constant as input_const_name + input_const_shape, activation_type by
    setActivationFunction: sigmoid on the fourth), CreateCompositeMrvlSumLayer; only the last
    names the source nodes."""
    result = mrvl_convert.convert(_model("div"), tmp_path / "o")
    layers = _gelu_layers(result)
    assert [a["layer_name"] for a in layers] == [[k] for k in GELU_KINDS]
    assert [a["composite_name"] for a in layers] == [["mrvl.gelu_erf"]] * 5
    assert [a["source_nodes"] for a in layers] == [[]] * 4 + [["scale", "erf", "one", "gate",
                                                                "half"]]
    assert [a.get("activation_type") for a in layers] == [None] * 3 + [["sigmoid"]] + [None]
    for a in layers:
        assert a["data_layout"] == a["out_layout"] == ["NHWC"]
        assert a["out_layout_shape"] == ["1", "48", "64", "1"]
    assert [a["num_inputs"] for a in layers] == ["2"] * 5   # a constant counts, as in Sum2D
    two = [k for k, a in enumerate(layers) if "data_layout_shape_1" in a]
    assert two == [0, 3, 4]   # x * x, x * s with sigmoid, x * gate
    assert all(layers[k]["data_layout_shape_1"] == ["1", "48", "64", "1"] for k in two)
    consts = [a for a in layers if "input_const_name" in a]
    assert [float(a["input_const"]["max"]) for a in consts] == pytest.approx(
        [2 * 0.044715 * math.sqrt(2 / math.pi), 2 * math.sqrt(2 / math.pi)], rel=1e-7)
    assert all(a["input_const_shape"] == ["1", "1", "1", "1"] for a in consts)


ALL_FORMS = sorted(ERF_FORMS) + ["Gelu:tanh", "tanh:mul", "tanh:pow"]


def _nodes(result):
    return json.loads(next(p for p in result.files if p.name.endswith("-nodes.json"))
                      .read_text())


@pytest.mark.parametrize("form", ALL_FORMS)
def test_every_form_is_five_layers_none_left_unread(tmp_path, form):
    """Each form's chain is the five layers, the fourth with sigmoid fused; every layer's
    output is read by a later layer or is the subgraph's output (half_first's own Mul(x, 0.5)
    feeds the sigmoid's layer, tanh:mul's own x * x the second); every node is on the accelerator; and the hybrid stays within
    the bound (exact forms) or fp16 rounding (tanh forms) of onnxruntime on the model."""
    model = _model(form)
    result, x, got, want = _run(model, tmp_path)
    doc = _nodes(result)
    gelu = [(k, n["attrs"]) for k, n in enumerate(doc["nodes"])
            if n["op"] == "tvm_op" and n["attrs"]["composite_name"][0].startswith("mrvl.gelu")]
    # tanh:mul: the model's own x * x (a Mul2D of its own) is the chain's first layer
    own = 1 if form == "tanh:mul" else 0
    assert [a["layer_name"][0] for _, a in gelu] == GELU_KINDS[own:]
    assert [a.get("activation_type") for _, a in gelu] == \
        [None] * (3 - own) + [["sigmoid"]] + [None]
    read = {i[0] for n in doc["nodes"] for i in n.get("inputs", [])}
    read |= {h[0] for h in doc["heads"]}
    assert all(k in read for k, n in enumerate(doc["nodes"]) if n["op"] == "tvm_op")
    if form == "half_first":
        half = next(k for k, n in enumerate(doc["nodes"])
                    if n["op"] == "tvm_op" and n["attrs"]["composite_name"] == ["mrvl.mul"])
        assert half in {i[0] for i in doc["nodes"][gelu[-2][0]]["inputs"]}
    assert all(e["placement"] == "mrvl" for e in result.report["nodes"])
    exact = form in ERF_FORMS
    bound = (TANH_APPROXIMATION_BOUND if exact else 0.0) + FP16_SLACK * U * np.abs(x)
    assert np.all(np.abs(got - want) <= bound)


def test_past_fp16_range_the_result_is_gelus_limits(tmp_path):
    """Past |x| 97 the sigmoid's argument leaves fp16's range and past 255 x * x overflows (the
    simulator warns): sigmoid is 1 or 0 there, so y is x or 0, what GELU is there."""
    model = _model("div")
    result = mrvl_convert.convert(model, tmp_path / "o")
    far = np.array([-60000, -1000, -300, -200, -100, 100, 200, 300, 1000, 60000.0])
    x = _feed(tuple(far))
    session = HybridSession(result.out_dir, on_range_error="warn", threads=1)
    with pytest.warns(Fp16RangeWarning, match="inf"):
        [got] = session.run(None, {"x": x})
    tail = got.reshape(-1)[-far.size:]
    assert np.array_equal(tail, np.where(far > 0, far, 0.0).astype(np.float32))


def test_com_microsoft_gelu_is_not_the_onnx_op(tmp_path):
    """The contrib op of the same name is left alone (its own domain, its own contract)."""
    b = Builder()
    x = token_front(b, [1, 8, 16])
    b.nodes.append(helper.make_node("Gelu", [x], ["g"], name="gelu", domain="com.microsoft"))
    b.nodes.append(helper.make_node("Relu", ["g"], ["y"], name="relu"))
    graph = helper.make_graph(b.nodes, "ms", b.inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [1, 8, 16])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    result = mrvl_convert.convert(model, tmp_path / "o")
    entry = result.placement("gelu")
    assert entry["placement"] == "cpu"
    assert "domain com.microsoft" in entry["reason"], entry["reason"]


def test_constants_written_with_six_decimals_are_taken(tmp_path):
    """Div by 1.414214 (sqrt 2 to six decimals: 3e-7 relative, within CONST_RTOL)."""
    b = Builder()
    x = token_front(b, [1, 8, 16])
    scaled = b.op("Div", [x, b.const(np.float32(1.414214))], name="scale")
    gate = b.op("Add", [b.op("Erf", [scaled], name="erf"), b.const(np.float32(1.0))], name="one")
    y = b.op("Mul", [b.op("Mul", [x, gate], name="gate"), b.const(np.float32(0.5))], name="half")
    model = b.model([y])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert result.placement("erf")["rule"] == "mrvl.gelu_erf"
    assert mrvl_convert.compare(model, result.out_dir).passed
