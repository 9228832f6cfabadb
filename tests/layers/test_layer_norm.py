"""LayerNormalization on layer set marvell (issue 27): the codegen has no LayerNorm layer, so
layers/layer_norm.py lowers the opset-17 op to ReduceMean, Sub, Mul2D, ReduceMean, Sum2D, Rsqrt,
Mul2D, Mul2D, Sum2D (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc), and the decomposed forms exporters write map node
by node, Div(d, Sqrt(v)) as Rsqrt + Mul2D. Exact up to fp16 rounding; in range while every
|x - mean| <= 255 along the axis. Every model is checked against onnxruntime (compare)."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime import Fp16RangeWarning, HybridSession
from support.layer_chains import layer_kinds
from support.models import Builder
from support.onnxref import fp16_round
from support.transformer_ops import gelu_erf, layer_norm_decomposed, layer_norm_op, token_front

SHAPE = [1, 12, 32]
LN_KINDS = ["ReduceMean", "Sub", "Mul2D", "ReduceMean", "Sum2D", "Rsqrt", "Mul2D", "Mul2D",
            "Sum2D"]


def _op_model(shape=SHAPE, **kwargs):
    b = Builder(opset=17)
    return b.model([layer_norm_op(b, token_front(b, shape), shape[-1], **kwargs)])


def _feed(shape=SHAPE, scale: float = 3.0, seed: int = 1):
    rng = np.random.default_rng(seed)
    return {"x": fp16_round(rng.standard_normal(shape) * scale + rng.standard_normal(
        shape[:-1] + [1]) * 10)}


def _converted(model, tmp_path, feed=None):
    result = mrvl_convert.convert(model, tmp_path / "o")
    comparison = mrvl_convert.compare(model, result.out_dir, feed or _feed(), layers=True)
    assert comparison.passed, comparison.to_dict()
    assert comparison.first_layer_over is None
    return result


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_op_is_nine_layers_in_one_region_eight_without_bias(tmp_path, bias):
    result = _converted(_op_model(bias=bias), tmp_path)
    assert result.summary["cpu_nodes"] == 0 and result.summary["mrvl_subgraphs"] == 1
    # no bias: no Sum2D of zeros (x + 0 is x)
    assert layer_kinds(result) == ["FC"] + (LN_KINDS if bias else LN_KINDS[:-1])
    entry = result.placement("ln")
    assert entry["rule"] == "mrvl.layer_norm" and "|x - mean| <= 255" in entry["note"]


def test_layer_norm_op_on_a_4d_token_tensor(tmp_path):
    """[B, heads, T, d] normalised over d: the last axis is NHWC's C as it lies."""
    b = Builder(opset=17)
    x = b.op("Reshape", [token_front(b, [1, 6, 16]), b.const(np.array([1, 6, 2, 8]))])
    model = b.model([layer_norm_op(b, x, 8)])
    result = _converted(model, tmp_path, _feed([1, 6, 16]))
    assert result.summary["cpu_nodes"] == 0
    assert layer_kinds(result)[-len(LN_KINDS):] == LN_KINDS


@pytest.mark.parametrize("square,divide", [("pow", "div"), ("mul", "div"),
                                           ("pow", "reciprocal"), ("mul", "reciprocal")])
def test_decomposed_layer_norm_stays_on_mrvl_with_no_cut(tmp_path, square, divide):
    b = Builder()
    model = b.model([layer_norm_decomposed(b, token_front(b, SHAPE), SHAPE[-1], square, divide)])
    result = _converted(model, tmp_path)
    assert result.summary["cpu_nodes"] == 0 and result.summary["mrvl_subgraphs"] == 1
    assert "Rsqrt" in layer_kinds(result)
    if divide == "div":
        assert result.placement("normed")["rule"] == "mrvl.sqrt_div"


def test_layer_norm_over_other_axes_stays_on_cpu_and_says_why(tmp_path):
    b = Builder(opset=17)
    x = token_front(b, [1, 4, 8])
    ins = [x, b.const(np.ones([4, 8], np.float32)), b.const(np.zeros([4, 8], np.float32))]
    model = b.model([b.op("LayerNormalization", ins, name="ln", axis=1)])
    result = mrvl_convert.convert(model, tmp_path / "o")
    entry = result.placement("ln")
    assert entry["placement"] == "cpu" and "only the last axis maps" in entry["reason"]
    assert mrvl_convert.compare(model, result.out_dir).passed


def test_a_division_of_the_sqrt_by_an_activation_is_not_taken(tmp_path):
    """Div(Sqrt(v), d): the Sqrt is the dividend, no Rsqrt form of it (the Sqrt alone is a
    Power layer, mrvl.sqrt); the division by an activation is the general pair form,
    Power(d, -1) then Mul2D (mrvl.div_pair, layers/_div_pairs.py), not mrvl.sqrt_div."""
    b = Builder()
    x = token_front(b, [1, 4, 8])
    s = b.op("Sqrt", [b.op("Relu", [x])], name="sqrt")
    model = b.model([b.op("Div", [s, b.op("Add", [x, b.const(np.float32(100))])], name="div")])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert result.placement("div")["rule"] == "mrvl.div_pair"
    assert result.placement("sqrt")["rule"] == "mrvl.sqrt"


def _run(model, tmp_path, x):
    result = mrvl_convert.convert(model, tmp_path / "o")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        HybridSession(result.out_dir, threads=1, on_range_error="warn").run(None, {"x": x})
    return [w for w in caught if issubclass(w.category, Fp16RangeWarning)]


def test_the_stated_fp16_range(tmp_path):
    """|x - mean| up to 255 keeps d * d finite; a row with |x - mean| at 300 overflows it and
    the simulator warns (on_range_error="warn"; it raises by default)."""
    shape = [1, 2, 8]
    def rows(deviation: float) -> np.ndarray:
        row = np.tile([-deviation, deviation], 4) + 1000
        return fp16_round(np.stack([row, np.full(8, 3.0)]).reshape(shape))
    assert not _run(_op_model(shape), tmp_path / "a", rows(255))
    caught = _run(_op_model(shape), tmp_path / "b", rows(300))
    assert caught and "Mul2D" in str(caught[0].message)


def test_layer_norm_chain_attributes_are_the_codegen_writers(tmp_path):
    """Golden, a [1, 4, 8] token tensor written R4 [1, 4, 8, 1] (resizeInputOutputLayoutTo4dim):
    CreateCompositeMrvlReduceLayer (axis normalised to the physical 2, keepdims),
    CreateCompositeMrvlSubtractLayer and CreateCompositeMrvlMulLayer (data_layout_shape_<i> per
    activation, the [1, 4, 1, 1] statistics broadcasting), CreateCompositeMrvlSumLayer (epsilon,
    beta as input_const_name + input_const_shape), CreateCompositeMrvlActivationLayer (Rsqrt:
    no attribute of its own); only the last layer names the node."""
    result = mrvl_convert.convert(_op_model([1, 4, 8]), tmp_path / "o")
    doc = json.loads(next(p for p in result.files if p.name.endswith("-nodes.json")).read_text())
    layers = [n["attrs"] for n in doc["nodes"] if n["op"] == "tvm_op"][1:]
    assert [a["layer_name"] for a in layers] == [[k] for k in LN_KINDS]
    assert [a["source_nodes"] for a in layers] == [[]] * 8 + [["ln"]]
    full, stat = ["1", "4", "8", "1"], ["1", "4", "1", "1"]
    for k in (0, 3):
        assert layers[k]["axis"] == ["2"] and layers[k]["keepdims"] == ["1"]
        assert layers[k]["data_layout_shape"] == full and layers[k]["out_layout_shape"] == stat
    assert (layers[1]["data_layout_shape_0"], layers[1]["data_layout_shape_1"]) == (full, stat)
    assert (layers[2]["data_layout_shape_0"], layers[2]["data_layout_shape_1"]) == (full, full)
    assert (layers[6]["data_layout_shape_0"], layers[6]["data_layout_shape_1"]) == (full, stat)
    assert layers[5]["data_layout_shape"] == layers[5]["out_layout_shape"] == stat
    assert not {"axis", "alpha", "exponent", "input_const_name"} & set(layers[5])
    eps, gamma, beta = layers[4], layers[7], layers[8]
    assert float(eps["input_const"]["max"]) == pytest.approx(1e-5, rel=1e-7)
    assert eps["input_const_shape"] == ["1", "1", "1", "1"]
    assert gamma["input_const_shape"] == beta["input_const_shape"] == ["1", "1", "8", "1"]
    assert (gamma["input_const"]["min"], gamma["input_const"]["max"]) == ("0.5", "1.5")
    assert all(a["data_layout"] == a["out_layout"] == ["NHWC"] for a in layers)


@pytest.mark.parametrize("opset", [13, 17])
def test_a_bert_mlp_sub_block_is_one_region(tmp_path, opset):
    """x + FC(GELU(FC(x))) then LayerNorm (post-norm, as BERT writes it; decomposed before
    opset 17): nothing on CPU, and the hybrid computes what onnxruntime does."""
    b = Builder(opset=opset)
    x = token_front(b, SHAPE)
    hidden = gelu_erf(b, b.matmul_add(x, SHAPE[-1], 4 * SHAPE[-1]))
    y = b.op("Add", [x, b.matmul_add(hidden, 4 * SHAPE[-1], SHAPE[-1])], name="residual")
    y = (layer_norm_op(b, y, SHAPE[-1]) if opset == 17
         else layer_norm_decomposed(b, y, SHAPE[-1]))
    result = _converted(b.model([y]), tmp_path)
    assert result.summary["cpu_nodes"] == 0 and result.summary["mrvl_subgraphs"] == 1
