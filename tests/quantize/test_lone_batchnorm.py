"""A BatchNormalization no Conv precedes (after a MaxPool, as vietcombank_captcha's and
openwakeword's embedding model's) stays whole in int8: kept in float by the recipe, it converts
as the channel affine it is in fp16, in the int8 region (issue 45 finding 7: on main its scale
was quantized, and the BN, its scale's and shift's DequantizeLinears went to the CPU)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

import mrvl_convert

from mrvl_convert.quantize.lone_bn import lone_batchnorms
from support.int8 import converted_int8, float_model, placements, run_both

C = 4


def maxpool_bn(name: str = "lone_bn") -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["p1", "g", "be", "m", "v"], ["bn"],
                              name=name),
             helper.make_node("Conv", ["bn", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w1": rng.standard_normal((C, 3, 3, 3)), "b1": rng.standard_normal(C),
             # a mean and shift far from 0, which fp16 rounds coarsely: rounded apart they
             # are not the folded shift the artifact rounds once
             "g": rng.uniform(0.5, 2, C), "be": rng.uniform(20, 60, C),
             "m": rng.uniform(20, 60, C), "v": rng.uniform(0.5, 2, C),
             "w2": rng.standard_normal((C, C, 3, 3)), "b2": rng.standard_normal(C)}
    return float_model(nodes, inits, [1, 3, 8, 8], [1, C, 4, 4])


def test_lone_batchnorm_stays_whole_in_int8(tmp_path):
    result, qdq = converted_int8(maxpool_bn(), tmp_path / "out")
    summary = result.report["summary"]
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0)
    assert placements(result)["lone_bn"]["rule"] == "mrvl.channel_affine"
    kept = result.manifest["quantization"]["kept_fp16_lone_batchnorm"]
    assert kept["nodes"] == ["lone_bn"] and "no Conv precedes" in kept["reason"]
    # its scale and shift stay float constants in the QDQ model
    model = onnx.load(str(qdq))
    bn = next(n for n in model.graph.node if n.op_type == "BatchNormalization")
    assert set(bn.input[1:]) <= {i.name for i in model.graph.initializer}
    # the fp16 affine inside the int8 region: within one output step of the QDQ model
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(8)]
    got, want = run_both(qdq, result.out_dir, feeds)
    scale = float(np.abs(want).max()) / 127
    assert np.abs(got - want).max() <= 1.01 * scale
    # and bit-equal to it once verify's reference rounds the affine as the artifact does
    # (verify/fp16_fold.py round_affine: x * round16(scale) + round16(shift))
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
    assert comparison.passed and all(r.max_abs == 0 for r in comparison.judged_rows)


def test_an_unnamed_lone_batchnorm_is_named_and_computes_the_same():
    model = maxpool_bn(name="")
    before = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert lone_batchnorms(model) == ["BatchNormalization_bn"]
    after = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(before.run(None, {"x": x})[0], after.run(None, {"x": x})[0])
