"""The newer Marvell set's elementwise kinds (issue 17): the JSON each writes, and its kernel
against onnxruntime.

Golden attributes: what each layer writes beyond the attributes every layer has is exactly what
the newer codegen writes for it, with the same value shapes (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc; the function
is named per case). Kernels: a 1x1 Conv with identity weights (exact in fp16 on fp16 inputs) keeps
the region compute-heavy and hands the layer fp16 values; the hybrid output is compared with
onnxruntime's fp32 output of the same model within the fp16 bound of ``onnxref``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.layers import UPSTREAM
from mrvl_convert.runtime import HybridSession
from support.models import Builder, run_ort
from support.onnxref import assert_close_fp16, fp16_round

# What every layer of the emitter carries, whatever its kind (mrvl_json._layer_node).
COMMON = {"layer_name", "composite_name", "func_name", "func_node_name", "num_inputs",
          "num_outputs", "shape", "dtype", "data_layout", "data_layout_shape", "out_layout",
          "out_layout_shape", "from_tuple_idx", "mrvl_nodes_idx", "kernel_const", "bias_const",
          "beta_const", "gamma_const", "var_const", "mean_const", "source_nodes", "rule"}
ACTIVATION_LAYER = "CreateCompositeMrvlActivationLayer"

Op = Callable[[Builder, str], str]


def identity_front(b: Builder, shape: List[int]) -> str:
    """x -> an exact identity Conv 1x1 (4-D) or Gemm (2-D): the region's compute-heavy layer."""
    x = b.input("x", shape)
    c = shape[1]
    if len(shape) == 2:
        return b.op("Gemm", [x, b.const(np.eye(c, dtype=np.float32)),
                             b.const(np.zeros(c, np.float32))], name="front", transB=1)
    return b.op("Conv", [x, b.const(np.eye(c, dtype=np.float32).reshape(c, c, 1, 1))],
                name="front", kernel_shape=[1, 1])


def chain(shape: List[int], op: Op, opset: int = 13) -> onnx.ModelProto:
    b = Builder(opset=opset)
    return b.model([op(b, identity_front(b, shape))])


def convert(model: onnx.ModelProto, out: Path, **kwargs) -> mrvl_convert.Result:
    return mrvl_convert.convert(model, out, **kwargs)


def layers(result: mrvl_convert.Result) -> List[Dict]:
    found = []
    for path in sorted(result.files):
        if path.name.endswith("-nodes.json"):
            doc = json.loads(path.read_text())
            found += [n["attrs"] for n in doc["nodes"] if n["op"] == "tvm_op"]
    return found


def the_layer(result: mrvl_convert.Result, kind: str) -> Dict:
    [layer] = [a for a in layers(result) if a["layer_name"] == [kind]]
    return layer


def own(attrs: Dict) -> Dict:
    return {k: v for k, v in attrs.items() if k not in COMMON}


def run_both(model: onnx.ModelProto, out: Path, shape: List[int], seed: int = 0,
             scale: float = 3.0):
    x = fp16_round(np.random.default_rng(seed).standard_normal(shape) * scale)
    result = convert(model, out)
    [got] = HybridSession(result.out_dir, threads=1).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    return result, got, want


# ---- golden attributes ------------------------------------------------------------------------

def _clip(b: Builder, x: str) -> str:
    return b.op("Clip", [x, b.const(np.array(0, np.float32)), b.const(np.array(6, np.float32))],
                name="op")


GOLDEN = [
    # (kind, op, expected own attributes of a 4-D layer, the codegen function that writes them)
    ("Relu", lambda b, x: b.op("Relu", [b.op("MaxPool", [x], kernel_shape=[1, 1])], name="op"),
     {"alpha": ["1.000000"]}, ACTIVATION_LAYER),
    ("LeakyRelu", lambda b, x: b.op("LeakyRelu", [x], name="op", alpha=0.1),
     {"alpha": ["0.100000"]}, ACTIVATION_LAYER),
    ("Clip", _clip, {"a_min": ["0.000000"], "a_max": ["6.000000"]}, ACTIVATION_LAYER),
    ("Sigmoid", lambda b, x: b.op("Sigmoid", [b.op("MaxPool", [x], kernel_shape=[1, 1])],
                                  name="op"), {}, ACTIVATION_LAYER),
    ("Tanh", lambda b, x: b.op("Tanh", [b.op("MaxPool", [x], kernel_shape=[1, 1])], name="op"),
     {}, ACTIVATION_LAYER),
    ("Softmax", lambda b, x: b.op("Softmax", [x], name="op", axis=1), {}, ACTIVATION_LAYER),
    ("Power", lambda b, x: b.op("Pow", [x, b.const(np.array(3, np.float32))], name="op"),
     {"exponent": ["3.000000"]}, ACTIVATION_LAYER),
    ("Rsqrt", lambda b, x: b.op("Reciprocal", [b.op("Sqrt", [x])], name="op"), {},
     ACTIVATION_LAYER),
]


@pytest.mark.parametrize("kind,op,expected,function", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_activation_layer_writes_the_codegen_attributes(tmp_path, kind, op, expected, function):
    """4-D: R4 (resizeInputOutputLayoutTo4dim: NHWC, 4 values per shape) plus the kind's own
    attribute, as ``function`` writes it (std::to_string: six decimals)."""
    result = convert(chain([1, 3, 4, 5], op), tmp_path / "o")
    layer = the_layer(result, kind)
    assert own(layer) == expected, function
    assert layer["data_layout"] == layer["out_layout"] == ["NHWC"]
    assert layer["data_layout_shape"] == layer["out_layout_shape"] == ["1", "4", "5", "3"]
    assert layer["composite_name"] == [f"mrvl.{kind.lower()}".replace("leakyrelu", "leaky_relu")]


@pytest.mark.parametrize("kind,op", [("Sigmoid", lambda b, x: b.op("Sigmoid", [x], name="op")),
                                     ("Softmax", lambda b, x: b.op("Softmax", [x], name="op"))])
def test_activation_layer_on_2d_is_written_nc(tmp_path, kind, op):
    """CreateCompositeMrvlActivationLayer: a 2-D input is ``NC`` with its own 2 values, not R4."""
    result = convert(chain([1, 6], lambda b, x: op(b, b.op("Relu", [x]))), tmp_path / "o")
    layer = the_layer(result, kind)
    assert layer["data_layout"] == layer["out_layout"] == ["NC"]
    assert layer["data_layout_shape"] == layer["out_layout_shape"] == ["1", "6"]


def test_mul2d_of_two_activations_writes_one_shape_per_input(tmp_path):
    """CreateCompositeMrvlMulLayer + resizeInputOutputLayoutTo4dim: data_layout_shape_<i> per
    activation input (the squeeze-excite gate broadcasts, [1, 1, 1, C] in NHWC), fused sigmoid
    by setActivationFunction."""
    def se(b: Builder, x: str) -> str:
        gate = b.op("GlobalAveragePool", [x])
        return b.op("Sigmoid", [b.op("Mul", [gate, x], name="op")])
    layer = the_layer(convert(chain([1, 3, 4, 5], se), tmp_path / "o"), "Mul2D")
    assert own(layer) == {"data_layout_shape_0": ["1", "4", "5", "3"],
                          "data_layout_shape_1": ["1", "1", "1", "3"],
                          "activation_type": ["sigmoid"]}
    assert layer["data_layout"] == ["NHWC"] and layer["num_inputs"] == "2"


def test_mul2d_by_a_constant_writes_input_const(tmp_path):
    """resizeInputOutputLayoutTo4dim: a constant operand is input_const_name + input_const_shape
    (4-D); the const_ref record is this project's, as for Sum2D."""
    def op(b: Builder, x: str) -> str:
        return b.op("Mul", [x, b.const(np.full([1, 1, 4, 5], 0.5, np.float32))], name="op")
    result = convert(chain([1, 3, 4, 5], op), tmp_path / "o")
    layer = the_layer(result, "Mul2D")
    assert set(own(layer)) == {"data_layout_shape_0", "input_const_name", "input_const",
                               "input_const_shape"}
    assert layer["input_const_shape"] == ["1", "4", "5", "1"]


def test_sub_writes_activation_type_and_r4(tmp_path):
    """CreateCompositeMrvlSubtractLayer: R4, activation_type from setActivationFunction."""
    def op(b: Builder, x: str) -> str:
        return b.op("Tanh", [b.op("Sub", [x, b.op("Relu", [x])], name="op")])
    layer = the_layer(convert(chain([1, 3, 4, 5], op), tmp_path / "o"), "Sub")
    assert own(layer) == {"data_layout_shape_0": ["1", "4", "5", "3"],
                          "data_layout_shape_1": ["1", "4", "5", "3"],
                          "activation_type": ["tanh"]}


@pytest.mark.parametrize("act", ["Tanh", "Sigmoid", "Relu"])
def test_conv_fc_sum_fuse_tanh_and_sigmoid(tmp_path, act):
    """CreateCompositeMrvlConv2DLayer, CreateCompositeMrvlFcLayer and setActivationFunction
    (Sum2D) write activation_type relu, tanh or sigmoid; upstream v0.19 fuses only relu."""
    b = Builder()
    x = b.input("x", [1, 3, 6, 6])
    y = b.op(act, [b.conv(x, 3, 4, pads=[1, 1, 1, 1])], name="conv_act")
    y = b.op(act, [b.op("Add", [y, b.conv(y, 4, 4, pads=[1, 1, 1, 1])])], name="sum_act")
    y = b.op("Flatten", [y], axis=1)
    y = b.op(act, [b.gemm(y, 144, 5, transB=1)], name="fc_act")
    model = b.model([y])
    result = convert(model, tmp_path / "m")
    fused = {a["layer_name"][0]: a.get("activation_type") for a in layers(result)
             if a["layer_name"][0] in ("Sum2D", "FC")}
    convs = [a.get("activation_type") for a in layers(result) if a["layer_name"] == ["Conv2D"]]
    assert fused == {"Sum2D": [act.lower()], "FC": [act.lower()]}
    assert convs == [[act.lower()], None]
    assert result.summary["cpu_nodes"] == 0
    feed = {"x": np.random.default_rng(1).standard_normal([1, 3, 6, 6]).astype(np.float32)}
    [got] = HybridSession(result.out_dir, threads=1).run(None, feed)
    [want] = run_ort(model, feed).values()
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * max(1.0, np.abs(want).max()))
    upstream = convert(model, tmp_path / "u", layer_set=UPSTREAM)
    if act != "Relu":
        entry = upstream.placement("conv_act")
        assert entry["placement"] == "cpu"
        assert entry["reason"] == (f"no rule handles op type {act}; layer set marvell would "
                                   "take it (mrvl.conv2d_nhwc2nhwc)")


def test_upstream_layer_set_names_the_set_that_would_take_a_node(tmp_path):
    model = chain([1, 3, 4, 5], lambda b, x: b.op("Sigmoid", [b.op("MaxPool", [x],
                                                                   kernel_shape=[1, 1])],
                                                  name="op"))
    entry = convert(model, tmp_path / "u", layer_set=UPSTREAM).placement("op")
    assert entry["placement"] == "cpu"
    assert entry["reason"] == ("no rule handles op type Sigmoid; layer set marvell would take "
                               "it (mrvl.sigmoid)")
    assert convert(model, tmp_path / "m").placement("op")["placement"] == "mrvl"


# ---- kernels against onnxruntime --------------------------------------------------------------

def _random_shape(seed: int, rank: int) -> List[int]:
    rng = np.random.default_rng(100 + seed)
    if rank == 2:
        return [1, int(rng.integers(1, 17))]
    return [1, int(rng.integers(1, 9)), int(rng.integers(1, 8)), int(rng.integers(1, 8))]


def _positive(b: Builder, x: str) -> str:
    """x * x + 0.5 (Mul2D, Sum2D): fp16 values >= 0.5, for Sqrt."""
    return b.op("Add", [b.op("Mul", [x, x]), b.const(np.array(0.5, np.float32))])


KERNELS = [
    # (name, op, roundings of the fp16 bound, ranks)
    ("Relu", lambda b, x: b.op("Relu", [b.op("MaxPool", [x], kernel_shape=[1, 1])]), 0, (4,)),
    ("LeakyRelu", lambda b, x: b.op("LeakyRelu", [x], alpha=0.2), 2, (2, 4)),
    ("Clip", _clip, 1, (4,)),
    ("ClipAsymmetric", lambda b, x: b.op("Clip", [x, b.const(np.array(-1.5, np.float32)),
                                                  b.const(np.array(2.25, np.float32))]), 1, (4,)),
    ("Sigmoid", lambda b, x: b.op("Sigmoid", [b.op("MaxPool", [x], kernel_shape=[1, 1])]), 1,
     (4,)),
    ("Tanh", lambda b, x: b.op("Tanh", [b.op("MaxPool", [x], kernel_shape=[1, 1])]), 1, (4,)),
    ("Softmax", lambda b, x: b.op("Softmax", [x], axis=1), 2, (2, 4)),
    ("Power", lambda b, x: b.op("Pow", [x, b.const(np.array(3, np.float32))]), 1, (2, 4)),
    # Rsqrt's input is rounded twice before it (Mul2D, Sum2D), each halved by the square root.
    ("Rsqrt", lambda b, x: b.op("Reciprocal", [b.op("Sqrt", [_positive(b, x)])]), 2, (4,)),
]


def _kernel_cases():
    for name, op, roundings, ranks in KERNELS:
        for rank in ranks:
            for seed in range(2):
                yield pytest.param(op, roundings, _random_shape(seed, rank), seed,
                                   id=f"{name}-{rank}d-{seed}")


@pytest.mark.parametrize("op,roundings,shape,seed", list(_kernel_cases()))
def test_kernel_matches_onnxruntime(tmp_path, op, roundings, shape, seed):
    model = chain(shape, op)
    result, got, want = run_both(model, tmp_path / "o", shape, seed)
    assert result.summary["mrvl_subgraphs"] == 1
    assert result.summary["cpu_nodes"] == 0
    if roundings == 0:
        np.testing.assert_array_equal(got, want)
    else:
        assert_close_fp16(got, want, want, roundings)


@pytest.mark.parametrize("seed", [0, 1])
def test_sub_of_a_broadcast_mean_matches_onnxruntime(tmp_path, seed):
    """Sub(x, GlobalAveragePool(x)): the mean broadcasts into x (data_layout_shape_1 is
    [1, 1, 1, C]); the fused Relu follows."""
    shape = _random_shape(seed, 4)
    model = chain(shape, lambda b, x: b.op("Relu", [b.op("Sub", [
        x, b.op("GlobalAveragePool", [x])])]))
    result, got, want = run_both(model, tmp_path / "o", shape, seed)
    assert [a["layer_name"][0] for a in layers(result)].count("Sub") == 1
    x = fp16_round(np.random.default_rng(seed).standard_normal(shape) * 3.0)
    mean = np.abs(x).mean(axis=(2, 3), keepdims=True)
    # The mean is rounded once, the difference once: each of a term of |x| + |mean|.
    assert_close_fp16(got, want, np.abs(x) + mean, roundings=2)


@pytest.mark.parametrize("op,reason", [
    (lambda b, x: b.op("LeakyRelu", [x], name="op", alpha=1e-7),
     "written with six decimals (0.000000) changes"),
    (lambda b, x: b.op("Softmax", [x], name="op", axis=2), "on axis 2 of a 4-D tensor"),
    (lambda b, x: b.op("Pow", [x, b.const(np.array([2, 3, 2], np.float32).reshape(1, 3, 1, 1))],
                       name="op"), "one constant value"),
    (lambda b, x: b.op("Sub", [b.op("GlobalAveragePool", [x]), x], name="op"),
     "the first must have the output's shape"),
    (lambda b, x: b.op("Sub", [b.const(np.ones([1, 3, 4, 5], np.float32)),
                               b.op("GlobalAveragePool", [x])], name="op"),
     "is a constant; the layer takes activations"),
])
def test_what_the_newer_layers_refuse_stays_on_cpu_with_why(tmp_path, op, reason):
    entry = convert(chain([1, 3, 4, 5], op), tmp_path / "o").placement("op")
    assert entry["placement"] == "cpu" and reason in entry["reason"], entry


def test_softmax_before_opset_13_on_4d_runs_over_chw(tmp_path):
    """Opset < 13 flattens a 4-D Softmax on axis 1 to [N, C*H*W]: a channel softmax only when
    H = W = 1."""
    spatial = chain([1, 3, 4, 5], lambda b, x: b.op("Softmax", [x], name="op", axis=1), opset=11)
    assert convert(spatial, tmp_path / "s").placement("op")["placement"] == "cpu"
    pooled = chain([1, 3, 4, 5], lambda b, x: b.op("Softmax", [b.op("GlobalAveragePool", [x])],
                                                   name="op", axis=1), opset=11)
    result, got, want = run_both(pooled, tmp_path / "p", [1, 3, 4, 5])
    assert result.placement("op")["placement"] == "mrvl"
    assert_close_fp16(got, want, want, roundings=3)


def test_float_layers_stay_out_of_an_int8_region(tmp_path):
    """A Pow between DequantizeLinear and QuantizeLinear (a QDQ model's tail): the set has no
    int8 Pow, so it may run as an fp16 layer inside an int8 region, as a Softmax or LayerNorm
    does (``float_region``; verify rounds its reference there, ``verify/kept_fp16.py``). Alone,
    with no compute-heavy layer in its region, it stays on CPU."""
    b = Builder()
    x = b.input("x", [1, 10])
    scale, zero = b.const(np.array(0.05, np.float32)), b.const(np.array(0, np.int8))
    y = b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, scale, zero]), scale, zero])
    y = b.op("Pow", [y, b.const(np.array(3.0, np.float32))], name="op")
    out = b.const(np.array(1 / 127, np.float32))
    y = b.op("DequantizeLinear", [b.op("QuantizeLinear", [y, out, zero]), out, zero])
    entry = convert(b.model([y]), tmp_path / "q").placement("op")
    assert entry["placement"] == "cpu"
    assert "no compute-heavy layer" in entry["reason"], entry["reason"]


@pytest.mark.parametrize("op,bounds", [
    ("Min", {"a_min": -float(np.finfo(np.float32).max), "a_max": 6.0}),
    ("Max", {"a_min": -0.5, "a_max": float(np.finfo(np.float32).max)}),
])
def test_a_lone_min_or_max_against_one_value_is_a_clip_with_one_bound(tmp_path, op, bounds):
    value = 6.0 if op == "Min" else -0.5
    model = chain([1, 3, 4, 5], lambda b, x: b.op(op, [x, b.const(np.float32(value))], name="op"))
    result, got, want = run_both(model, tmp_path / "o", [1, 3, 4, 5])
    assert result.placement("op")["placement"] == "mrvl"
    attrs = the_layer(result, "Clip")
    assert {k: float(attrs[k][0]) for k in bounds} == pytest.approx(bounds)
    np.testing.assert_array_equal(got, fp16_round(want))  # a bound on the fp16 grid: exact


def test_min_of_a_constant_and_an_activation_is_the_clip_of_its_swap(tmp_path):
    """Min(c, x): the constant first (canonical_forms swaps it, bit for bit on onnxruntime)."""
    model = chain([1, 3, 4, 5], lambda b, x: b.op("Min", [b.const(np.float32(6)), x], name="op"))
    result, got, want = run_both(model, tmp_path / "o", [1, 3, 4, 5])
    entry = result.placement("op")
    assert entry["placement"] == "mrvl" and "became Min(x, c)" in entry["canonical"], entry
    assert float(the_layer(result, "Clip")["a_max"][0]) == 6.0
    np.testing.assert_array_equal(got, fp16_round(want))
