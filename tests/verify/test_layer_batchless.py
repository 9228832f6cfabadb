"""compare(..., layers=True) on a batchless ``[T, F]`` Conv network (madmom's key_cnn form), fp16
and int8. The converter computes its ``[T, F, C]`` tensors as ``[1, T, F, C]`` (the batch and
frame lifts). On main the per-layer run crashed in onnxruntime on the rewritten model (a lifted
Squeeze of nothing got axes [], which onnxruntime reads as "every unit axis"), and once past
that the layers of ``[T, F, C]`` tensors said "not compared: its layout gives [1, C, T, F]", the
boundary tensors "shape mismatch: hybrid [1, T, F, C], fp32 [T, F, C]", and the lifted input
``[1, T, F]`` "not a tensor of the reference model: not compared"."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from mrvl_convert import convert
from mrvl_convert.quantize import Quantization
from mrvl_convert.verify.compare import compare
from support.batchless_cnn import batchless_cnn
from support.models import canonicalized, run_ort

_U = 2.0 ** -24


def _feeds(seed: int, count: int = 2):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((12, 10)).astype(np.float32)} for _ in range(count)]


def test_the_canonical_graph_of_a_squeeze_of_nothing_runs_on_onnxruntime():
    """The lifted Squeeze without axes, of a [C] tensor, is the Reshape it is: onnxruntime runs
    the canonical graph, and gives the model's output within the bound of a mean of T * F
    terms added in another order (2 (n - 1) u max|y|)."""
    model = batchless_cnn(reshape=False)
    canonical, proto = canonicalized(model)
    assert any("frame axis 0" in why or "batch" in why for why in canonical.rewritten.values())
    probed = onnx.ModelProto()
    probed.CopyFrom(model)
    probed.graph.output.append(onnx.helper.make_tensor_value_info(
        "block2_elu_out", onnx.TensorProto.FLOAT, [12, 10, 6]))
    for feed in _feeds(0):
        want = run_ort(probed, feed, optimize=False)
        got = run_ort(proto, feed, ["squeeze_all_out"], optimize=False)["squeeze_all_out"]
        assert got.shape == want["squeeze_all_out"].shape == (6,)
        bound = 2 * (12 * 10 - 1) * _U * float(np.abs(want["block2_elu_out"]).max())
        assert np.all(np.abs(got - want["squeeze_all_out"]) <= bound)


def _layer_rows(comparison):
    return {row.tensor: row for row in comparison.rows if row.kind == "layer"}


@pytest.mark.parametrize("reshape", [True, False])
def test_every_layer_of_an_fp16_batchless_cnn_is_compared(tmp_path, reshape):
    """Each layer's NHWC [1, T, F, C] output is the model's [T, F, C] (not its NCHW order), each
    reshape layer's input as laid: every row compared, within tolerance, cosine > 0.9999."""
    model = batchless_cnn(reshape=reshape)
    convert(model, str(tmp_path / "fp16"))
    result = compare(model, str(tmp_path / "fp16"), _feeds(1), layers=True)
    layers = _layer_rows(result)
    assert {"block1_bn_mul_out", "block1_elu_out", "mean_pooled"} <= set(layers), sorted(layers)
    assert {"block2_elu_out", "block2_elu_out_seq"} & set(layers)  # as the model or lift names it
    assert not reshape or {"frames_flat_out_seq", "frames_back_out_seq"} <= set(layers)
    for row in result.rows:
        assert row.max_abs is not None, row  # the lifted input [1, T, F] too, from the rewrite
        if row.kind == "layer":
            assert row.passed and row.cosine > 0.9999, row
    assert result.passed and result.first_layer_over is None


def test_every_boundary_and_layer_of_an_int8_batchless_cnn_is_compared(tmp_path):
    """Against its QDQ model: the Mrvl stage takes the lifted input ``x_seq`` [1, T, F] (the CPU
    stage is the lift's Unsqueeze alone: the input's Q/DQ is lifted with the frames), compared
    with the rewritten model's, bit-equal; so is every layer, its fp16 BN and Elu layers too:
    the reference rounds them as the artifact does also where the lifts rename their tensors
    (earlier: no Elu row, "source node 'block1_elu' is not in the original model", and the
    lifted tensors one int8 step off; the Quantize of a Transpose the layer absorbed "not
    compared: its layout gives [1, 12, 10, 4], the model's tensor is [1, 4, 12, 10]"). The
    first layer, the expand_dims of the float input, is read as the model computes it (on
    integ9 onnxruntime's transpose optimizer handed the reference it quantized, clamped to
    the calibrated range: max_abs 0.27, "over", named by ``first_layer_over`` though the
    output was bit-equal)."""
    model = batchless_cnn(reshape=False)
    calibration = {"x": np.concatenate([f["x"] for f in _feeds(2, 4)])}
    result = convert(model, str(tmp_path / "int8"), policy="multi",
                     quantize=Quantization(calibration, "minmax"))
    kinds = [stage["kind"] for stage in result.manifest["stages"]]
    assert kinds == ["cpu", "mrvl"], kinds
    qdq = tmp_path / "int8" / result.manifest["quantization"]["file"]
    feeds = _feeds(3)
    assert max(float(np.abs(f["x"]).max()) for f in feeds) > float(
        np.abs(calibration["x"]).max())  # beyond the calibrated range: a clamp would show
    comparison = compare(str(qdq), str(tmp_path / "int8"), feeds, layers=True)
    boundary = [row for row in comparison.rows if row.kind == "boundary"]
    assert [row.tensor for row in boundary] == ["x_seq"]  # the lifted input, from the rewrite
    assert list(boundary[0].shape) == [1, 12, 10]
    assert all(row.max_abs == 0.0 and row.passed for row in comparison.rows
               if row.kind != "layer"), comparison.rows
    layers = _layer_rows(comparison)
    # the Quantize of block2's Transpose to NCHW: the stage's layer absorbed that Transpose
    assert all(row.max_abs is not None for row in layers.values()), layers
    assert "expand_channel_out_seq" in layers  # the lift's name of the expand_dims' tensor
    assert "block1_elu_out" in layers, sorted(layers)
    assert any(name.startswith("block2_elu_out") for name in layers), sorted(layers)
    assert len(layers) >= 15, sorted(layers)
    assert all(row.max_abs == 0.0 and row.passed for row in layers.values()), layers
    assert comparison.passed and comparison.first_layer_over is None
