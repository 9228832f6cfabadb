"""Cross-layer weight equalization (``quantize/equalize.py``, ``--equalize``; issue 30): exact
pairs only, the function kept within float32 rounding on onnxruntime, the ranges balanced, and
per-tensor int8 better for it."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize.equalize import equalizable_pairs, equalize
from mrvl_convert.quantize.recipe import Quantization, quantize_int8
from mrvl_convert.verify.metrics import Sums, snr_db

from support.rewrites import equalizable_chain as chain

EPS = 2.0 ** -23  # float32's machine epsilon


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def absolute(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every weight and bias made |.|: run on |x| it gives, per output element,
    the sum of |products| the float32 error bound of a chain of dot products is relative to."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for tensor in out.graph.initializer:
        tensor.CopyFrom(numpy_helper.from_array(np.abs(numpy_helper.to_array(tensor)),
                                                tensor.name))
    return out


def weights(model: onnx.ModelProto, conv: str, k: int = 1) -> np.ndarray:
    node = next(n for n in model.graph.node if n.name == conv)
    return next(numpy_helper.to_array(t) for t in model.graph.initializer
                if t.name == node.input[k])


def samples(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 1, 3, 8, 8)).astype(np.float32)


@pytest.mark.parametrize("middle", ["Relu", None, "LeakyRelu", "PRelu"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_equalized_model_equals_the_original_on_onnxruntime(middle, seed):
    """The stated bound, per output element: layers L = 3, fan-in K <= 72, each weight rounded
    once (2^-24) and each dot product in float32: |y' - y| <= L (K + 4) 2^-23 (|W3||W2||W1||x|),
    the right side computed by onnxruntime on the absolute model (Relu is the identity on
    non-negative values, and so are LeakyRelu and PRelu on the absolute model's non-negative
    values, so it is the chain's sum of |products|)."""
    model = chain(middle, seed)
    equalized = equalize(model)
    assert len(equalizable_pairs(model.graph)) == 2
    for x in samples(4, seed + 10):
        bound = 3 * (72 + 4) * EPS * run(absolute(model), np.abs(x))
        diff = np.abs(run(equalized, x) - run(model, x))
        assert (diff <= bound).all(), float((diff - bound).max())
    # It did rewrite: conv1's weights are not the original ones.
    assert not np.allclose(weights(equalized, "conv1"), weights(model, "conv1"))


def test_a_single_pair_gets_the_geometric_mean_of_the_two_ranges():
    model = chain("Relu")
    del model.graph.node[-1]  # conv3 gone: conv2 is the output
    model.graph.output[0].name = "c2"
    r1 = np.abs(weights(model, "conv1")).reshape(8, -1).max(1).astype(np.float64)
    r2 = np.abs(weights(model, "conv2")).max(axis=(0, 2, 3)).astype(np.float64)
    equalized = equalize(model)
    new1 = np.abs(weights(equalized, "conv1")).reshape(8, -1).max(1)
    new2 = np.abs(weights(equalized, "conv2")).max(axis=(0, 2, 3))
    np.testing.assert_allclose(new1, np.sqrt(r1 * r2), rtol=1e-6)
    np.testing.assert_allclose(new2, np.sqrt(r1 * r2), rtol=1e-6)
    # The bias moved with its channel: conv1's output channel c is divided by the same s[c].
    scale = r1 / np.sqrt(r1 * r2)
    np.testing.assert_allclose(weights(equalized, "conv1", 2),
                               weights(model, "conv1", 2) / scale, rtol=1e-6)


def test_a_chain_ends_balanced_within_the_settling_tolerance():
    equalized = equalize(chain("Relu"))
    out1 = np.abs(weights(equalized, "conv1")).reshape(8, -1).max(1)
    in2 = np.abs(weights(equalized, "conv2")).max(axis=(0, 2, 3))
    out2 = np.abs(weights(equalized, "conv2")).reshape(8, -1).max(1)
    in3 = np.abs(weights(equalized, "conv3")).reshape(8, -1).max(1)  # depthwise: one per channel
    np.testing.assert_allclose(out2, in3, rtol=1e-2)
    np.testing.assert_allclose(out1, in2, rtol=1e-2)


@pytest.mark.parametrize("middle", ["Clip", "HardSwish", "HardSigmoid", "Sigmoid"])
def test_no_pair_across_an_activation_scaling_does_not_commute_with(middle):
    """Relu6 (Clip 0..6) and hard-swish would need the bound scaled per channel; only
    conv2 -> conv3 is left, so conv1 keeps its weights exactly."""
    model = chain(middle)
    pairs = equalizable_pairs(model.graph)
    assert [(p.first.name, p.second.name) for p in pairs] == [("conv2", "conv3")]
    assert np.array_equal(weights(equalize(model), "conv1"), weights(model, "conv1"))


def test_a_conv_output_read_twice_is_left_alone():
    model = chain(None)
    model.graph.output.append(helper.make_tensor_value_info("c1", onnx.TensorProto.FLOAT, None))
    pairs = equalizable_pairs(model.graph)
    assert [(p.first.name, p.second.name) for p in pairs] == [("conv2", "conv3")]
    equalized = equalize(model)
    x = samples(1, 5)[0]
    c1 = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                               ).run(["c1"], {"x": x})[0] for m in (model, equalized)]
    np.testing.assert_array_equal(c1[0], c1[1])  # the tensor the other reader sees, as it was
    assert np.array_equal(weights(equalized, "conv1"), weights(model, "conv1"))


def test_a_shared_weight_is_copied_not_changed_for_its_other_reader():
    model = chain("Relu")
    model.graph.node.append(helper.make_node("Conv", ["x", "w1"], ["z"], name="other"))
    model.graph.output.append(helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    equalized = equalize(model)
    assert np.array_equal(weights(equalized, "other"), weights(model, "conv1"))
    assert not np.allclose(weights(equalized, "conv1"), weights(model, "conv1"))


def output_snr(qdq, model, xs) -> float:
    sums = Sums()
    for x in xs:
        sums.add(run(onnx.load(str(qdq)), x), run(model, x))
    return snr_db(sums)


def test_per_tensor_int8_is_closer_to_fp32_after_equalization(tmp_path):
    """conv1's small output channels vanish in one per-tensor weight scale; equalized, they
    share the range with conv2's inputs, and the QDQ model's output is nearer fp32."""
    model = chain("Relu")
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    calibration = {"x": samples(16, 1)[:, 0]}
    plain = quantize_int8(src, tmp_path / "plain.onnx", calibration)
    equalized = quantize_int8(src, tmp_path / "cle.onnx", calibration, equalize=True)
    test = list(samples(8, 2))
    before, after = output_snr(plain, model, test), output_snr(equalized, model, test)
    assert after > before + 3.0, (before, after)


def test_quantization_equalize_is_recorded_and_the_artifact_runs(tmp_path):
    model = chain("Relu")
    calibration = {"x": samples(16, 1)[:, 0]}
    mrvl_convert.convert(model, tmp_path / "out", name="m",
                         quantize=Quantization(calibration, equalize=True))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["quantization"]["equalize"] is True
    qdq = tmp_path / "out" / manifest["quantization"]["file"]
    session = mrvl_convert.HybridSession(tmp_path / "out")
    assert [s.kind for s in session.stages] == ["mrvl"]
    reference = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])
    x = samples(1, 3)[0]
    assert session.run(None, {"x": x})[0].shape == reference.run(None, {"x": x})[0].shape
