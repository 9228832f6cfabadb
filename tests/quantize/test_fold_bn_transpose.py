"""BatchNormalization after a ConvTranspose (Paddle's DBNet head: ConvTranspose -> Add(bias) ->
BatchNormalization -> Relu) folded into the ConvTranspose (quantize/fold_bn.py): within the
stated bound against the original on onnxruntime; and the head in int8 is one Mrvl subgraph,
bit-equal to onnxruntime's run of the QDQ model."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization
from mrvl_convert.quantize.fold_bn import fold_batchnorm
from support.int8 import run_both

CIN, COUT, SIDE = 4, 6, 5


def _head(group: int, separate_bias: bool) -> onnx.ModelProto:
    """Conv -> Relu -> ConvTranspose(k2 s2) [-> Add(b)] -> BN -> Relu -> ConvTranspose -> Add ->
    Sigmoid (DBNet's probability head, as Paddle exports it)."""
    rng = np.random.default_rng(group + 2 * separate_bias)
    inits = {"w0": rng.standard_normal((CIN, 3, 3, 3)) * 0.4, "b0": rng.standard_normal(CIN) * .1,
             "wt": rng.standard_normal((CIN, COUT // group, 2, 2)) * 0.5,
             "bt": rng.standard_normal((1, COUT, 1, 1)) * 0.3,
             "gamma": 1 + 0.3 * rng.standard_normal(COUT), "beta": rng.standard_normal(COUT),
             "mean": rng.standard_normal(COUT), "var": 0.2 + rng.random(COUT),
             "w2": rng.standard_normal((COUT, 1, 2, 2)) * 0.5, "b2": rng.standard_normal((1, 1, 1, 1))}
    transpose_in = ["r0", "wt"] if separate_bias else ["r0", "wt", "bt_flat"]
    if not separate_bias:
        inits["bt_flat"] = inits["bt"].reshape(-1)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("ConvTranspose", transpose_in, ["t"], kernel_shape=[2, 2],
                              strides=[2, 2], group=group, name="up")]
    if separate_bias:
        nodes.append(helper.make_node("Add", ["t", "bt"], ["tb"], name="up_bias"))
    nodes += [helper.make_node("BatchNormalization", ["tb" if separate_bias else "t", "gamma",
                                                      "beta", "mean", "var"], ["n"], name="bn",
                               epsilon=1e-5),
              helper.make_node("Relu", ["n"], ["r"]),
              helper.make_node("ConvTranspose", ["r", "w2"], ["t2"], kernel_shape=[2, 2],
                               strides=[2, 2]),
              helper.make_node("Add", ["t2", "b2"], ["logits"]),
              helper.make_node("Sigmoid", ["logits"], ["y"])]
    graph = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                      [1, 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1, 4 * SIDE, 4 * SIDE])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _tensor(model: onnx.ModelProto, x: np.ndarray, name: str) -> np.ndarray:
    """``name`` (a tensor of the model) for the input ``x``, on onnxruntime."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend([helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)])
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run([name], {"x": x})[0]


@pytest.mark.parametrize("group, separate_bias", [(1, True), (2, True), (1, False)])
def test_fold_into_conv_transpose_within_its_stated_bound(group, separate_bias):
    """Each BN output element within (K + 5) * 2^-23 * (sum |W'| |x| + |b'|) plus its own
    rounding, K = C_in / group products (k2 s2: windows do not overlap)."""
    model = _head(group, separate_bias)
    folded = fold_batchnorm(model)
    onnx.checker.check_model(folded)
    ops = [n.op_type for n in folded.graph.node]
    assert "BatchNormalization" not in ops and ops.count("Add") == 1  # the head's last Add only
    x = np.random.default_rng(7).standard_normal((1, 3, SIDE, SIDE)).astype(np.float32)
    want = _tensor(model, x, "n").astype(np.float64)
    got = _tensor(folded, x, "n").astype(np.float64)
    up = next(n for n in folded.graph.node if n.name == "up")
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in folded.graph.initializer}
    weight, bias = np.abs(inits[up.input[1]]), np.abs(inits[up.input[2]])
    r0 = np.abs(_tensor(model, x, "r0").astype(np.float64))[0]          # [CIN, S, S]
    per = CIN // group
    magnitude = np.zeros((COUT, 2 * SIDE, 2 * SIDE))
    for o in range(COUT):
        k = o // (COUT // group)
        block = r0[k * per:(k + 1) * per]
        w = weight[k * per:(k + 1) * per, o % (COUT // group)]           # [per, 2, 2]
        for dh in range(2):
            for dw in range(2):
                magnitude[o, dh::2, dw::2] = np.tensordot(w[:, dh, dw], block, axes=1)
    bound = (per + 5) * 2.0 ** -23 * (magnitude + bias.reshape(-1, 1, 1)) + \
        2.0 ** -23 * np.abs(want[0])
    assert np.all(np.abs(got[0] - want[0]) <= bound)


def test_output_shape_conv_transpose_is_left_as_it_is():
    model = _head(1, True)
    next(n for n in model.graph.node if n.name == "up").attribute.extend(
        [helper.make_attribute("output_shape", [2 * SIDE, 2 * SIDE])])
    assert "BatchNormalization" in [n.op_type for n in fold_batchnorm(model).graph.node]


def test_head_in_int8_is_one_mrvl_subgraph_and_exact(tmp_path):
    rng = np.random.default_rng(0)
    calibration = {"x": rng.uniform(-1, 1, (16, 3, SIDE, SIDE)).astype(np.float32)}
    result = mrvl_convert.convert(_head(1, True), tmp_path / "head",
                                  quantize=Quantization(calibration))
    summary = result.report["summary"]
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0)
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    feeds = [{"x": rng.uniform(-1, 1, (1, 3, SIDE, SIDE)).astype(np.float32)} for _ in range(4)]
    got, want = run_both(qdq, result.out_dir, feeds)
    assert np.array_equal(got, want)
