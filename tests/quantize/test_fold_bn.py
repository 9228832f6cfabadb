"""BatchNormalization folded into the Conv before quantizing (quantize/fold_bn.py): the folded
model computes what the original computes within fold_bn's stated bound, on onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from mrvl_convert.quantize.fold_bn import fold_batchnorm


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


def test_fold_batchnorm_leaves_the_batchnorms_it_is_told_to_keep():
    model = _conv_bn_model(1, True)
    bn = next(n for n in model.graph.node if n.op_type == "BatchNormalization")
    bn.name = bn.name or "bn"
    assert [n.op_type for n in fold_batchnorm(model).graph.node] == ["Conv"]
    kept = fold_batchnorm(model, keep={bn.name})
    assert [n.op_type for n in kept.graph.node] == ["Conv", "BatchNormalization"]
