"""Bit-exactness on the corpus (issue 19): QDQ models from Marvell's quantize_static recipe (the
example MNIST CNN, the corpus's ResNet-50 and MobileNetV2-like CNN), converted; the int8 hybrid's
output equals onnxruntime's run of the same QDQ model within 1 quantization step on >= 99.9% of
the elements and within 2 on all. BatchNormalization is folded into the Conv before quantizing
(``mrvl_convert/fold_bn.py``), so every Conv is int8 and each model is one Mrvl subgraph.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import corpus
import mrvl_convert
from mrvl_convert.quantize.fold_bn import fold_batchnorm
from mrvl_convert.quantize.recipe import load_calibration, quantize_int8
from test_int8 import EXAMPLE, output_scale, placements, run_both, steps


def _quantized_corpus_model(tmp_path: Path, model: onnx.ModelProto, samples: int):
    src = tmp_path / "float.onnx"
    onnx.save(model, src)
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    calibration = {name: rng.standard_normal([8] + shape[1:]).astype(np.float32)}
    qdq = quantize_int8(src, tmp_path / "q.onnx", calibration)
    feeds = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)]
    return qdq, feeds


def _assert_issue_target(qdq: Path, result, feeds) -> None:
    got, want = run_both(qdq, result.out_dir, feeds)
    diff = steps(got, want, output_scale(onnx.load(qdq)))
    assert np.mean(diff <= 1) >= 0.999, np.bincount(diff.astype(int).ravel())
    assert diff.max() <= 2, np.bincount(diff.astype(int).ravel())


def _mrvl_stages(result) -> int:
    return sum(s["kind"] == "mrvl" for s in result.manifest["stages"])


@pytest.mark.parametrize("name", ["mobilenet_v2",
                                  pytest.param("resnet50", marks=pytest.mark.slow)])
def test_corpus_int8_is_one_mrvl_subgraph_within_one_step(tmp_path, name):
    """Every Conv, Relu6 (Clip, and Min(Relu(x), 6) as a requant), residual Add, pool and the
    FC int8 on the accelerator in one subgraph (ResNet-50's final Softmax stays on CPU: the set
    has no int8 Softmax); the hybrid meets the issue's numbers."""
    if name == "resnet50" and name not in corpus.zoo_names():
        pytest.skip("this onnx wheel has no light ResNet-50")
    model = corpus.built(name) if name in corpus.BUILT else corpus.zoo(name)
    qdq, feeds = _quantized_corpus_model(tmp_path, model, samples=2 if name == "resnet50" else 20)
    ops = {n.op_type for n in onnx.load(qdq).graph.node}
    assert "BatchNormalization" not in ops and "Conv" in ops
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert _mrvl_stages(result) == 1
    on_cpu = {p["op_type"] for p in placements(result).values() if p["placement"] == "cpu"}
    assert on_cpu <= {"Softmax", "QuantizeLinear", "DequantizeLinear"}, on_cpu
    assert result.summary["mrvl_mac_share"] == 1.0
    _assert_issue_target(qdq, result, feeds)


def test_example_int8_is_one_mrvl_subgraph_within_one_step(tmp_path):
    images = load_calibration(EXAMPLE / "heldout.npz", EXAMPLE / "mnist_cnn.onnx")["input"]
    qdq = quantize_int8(EXAMPLE / "mnist_cnn.onnx", tmp_path / "q.onnx", {"input": images[:64]})
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert _mrvl_stages(result) == 1
    _assert_issue_target(qdq, result, [{"input": images[i:i + 1]} for i in range(64, 264)])


# ------------------------------------------------------------------------- BatchNorm folding
def _conv_bn_model(group: int, bias: bool, shared: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(group + 2 * bias)
    cin, cout = 4, 4 if group > 1 else 6
    inits = {"w": rng.standard_normal((cout, cin // group, 3, 3)) * 0.5,
             "gamma": 1 + 0.3 * rng.standard_normal(cout), "beta": rng.standard_normal(cout),
             "mean": rng.standard_normal(cout), "var": 0.2 + rng.random(cout)}
    if bias:
        inits["b"] = rng.standard_normal(cout)
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], name="conv",
                              pads=[1, 1, 1, 1], group=group),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["y"],
                              name="bn", epsilon=1e-3)]
    outputs = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, cout, 6, 6])]
    if shared:
        outputs.append(helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT,
                                                     [1, cout, 6, 6]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, cin, 6, 6])],
        outputs, [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": x})[0]


@pytest.mark.parametrize("group, bias", [(1, True), (1, False), (4, True)])
def test_fold_batchnorm_within_its_stated_bound(group, bias):
    """The folded model against the original on onnxruntime: each output element within
    (K + 4) * 2^-23 * sum |W'| |x| of its window (fold_bn's docstring), K the fan-in."""
    model = _conv_bn_model(group, bias)
    folded = fold_batchnorm(model)
    onnx.checker.check_model(folded)
    assert [n.op_type for n in folded.graph.node] == ["Conv"]
    assert {t.name for t in folded.graph.initializer} == set(folded.graph.node[0].input[1:])
    x = np.random.default_rng(7).standard_normal((1, 4, 6, 6)).astype(np.float32)
    want, got = _run(model, x), _run(folded, x)
    weight = numpy_helper.to_array(folded.graph.initializer[0]).astype(np.float64)
    magnitude = _conv_abs(np.abs(x.astype(np.float64)), np.abs(weight), group)
    fan_in = weight[0].size
    bound = (fan_in + 4) * 2.0 ** -23 * magnitude + 2.0 ** -23 * np.abs(want)
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


def _conv_abs(x: np.ndarray, w: np.ndarray, group: int) -> np.ndarray:
    """sum |w| |x| over each 3x3 window (pads 1), per output channel, in float64."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out_c, per_group = w.shape[0], w.shape[1]
    out = np.zeros((1, out_c, 6, 6))
    for o in range(out_c):
        g = o // (out_c // group)
        chans = padded[0, g * per_group:(g + 1) * per_group]
        for i in range(6):
            for j in range(6):
                out[0, o, i, j] = np.sum(chans[:, i:i + 3, j:j + 3] * w[o])
    return out


def test_fold_batchnorm_leaves_a_conv_read_elsewhere():
    """A Conv whose output is also a graph output keeps its BatchNormalization."""
    model = _conv_bn_model(1, True, shared=True)
    assert [n.op_type for n in fold_batchnorm(model).graph.node] == ["Conv", "BatchNormalization"]
