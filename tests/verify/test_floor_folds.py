"""The fp16 floor rounds a Conv -> BatchNormalization pair as the device holds it: one Conv of
folded weights W' = W * scale, b' = (b - mean) * scale + beta, its output rounded once
(``verify/floor_folds.py``). Rounding the model's own W, gamma, beta, mean, var and the Conv's
output is a form no device computes: slanet-plus's unfolded floor was half its folded one (so
its correct artifact read "3.4x the floor: a converter defect"), and a Conv whose output the
BatchNormalization re-centres from ~1000 has an unfolded floor 178x its folded one, 0.13 of the
output's peak (so a defect there read "within the floor: fp16-sensitive")."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.floor_folds import fold_conv_batchnorms
from mrvl_convert.verify.fp16_floor import floor_model
from support.models import Builder, run_ort


def conv_bn(offset: float = 0.0, as_constants: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x -> Conv (bias ``offset``) -> BatchNormalization (mean ``offset``, var 0.01) -> Relu ->
    Conv -> BatchNormalization. ``as_constants``: the weights as Constant nodes (Paddle's form)."""
    b = Builder(seed, opset=13)
    x = b.input("x", [1, 3, 8, 8])
    y = b.conv(x, 3, 8, pads=[1, 1, 1, 1])
    b.inits[-1].CopyFrom(numpy_helper.from_array(np.full(8, offset, np.float32),
                                                 b.inits[-1].name))
    rng = b.rng
    y = b.op("BatchNormalization", [
        y, b.const((1 + 0.1 * rng.standard_normal(8)).astype(np.float32)),
        b.const((0.1 * rng.standard_normal(8)).astype(np.float32)),
        b.const(np.full(8, offset, np.float32)),
        b.const(np.full(8, 0.01, np.float32))], name="bn1")
    y = b.op("Relu", [y], name="relu")
    y = b.bn(b.conv(y, 8, 4, pads=[1, 1, 1, 1]), 4)
    model = b.model([y], name="conv_bn")
    return _as_constants(model) if as_constants else model


def _as_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every initializer a Constant node instead, in front of the nodes."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes = [helper.make_node("Constant", [], [t.name], value=t, name=f"const_{t.name}")
             for t in copy.graph.initializer]
    del copy.graph.initializer[:]
    rest = list(copy.graph.node)
    del copy.graph.node[:]
    copy.graph.node.extend(nodes + rest)
    return copy


def _feed(seed: int = 0):
    return {"x": np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def _error_over_peak(model: onnx.ModelProto, other: onnx.ModelProto) -> float:
    want = run_ort(model, _feed(), optimize=False)
    got = run_ort(other, _feed(), optimize=False)
    name = model.graph.output[0].name
    return float(np.abs(got[name] - want[name]).max() / np.abs(want[name]).max())


def test_the_fold_alone_computes_the_pair_within_its_bound():
    """Bound (module docstring): the float32 rounding of W' and b', far below fp16's step;
    onnxruntime's own Conv+BN fusion disabled on both sides."""
    for as_constants in (False, True):
        model = conv_bn(as_constants=as_constants)
        folded = onnx.ModelProto()
        folded.CopyFrom(model)
        assert fold_conv_batchnorms(folded) == 2
        assert not any(n.op_type == "BatchNormalization" for n in folded.graph.node)
        assert _error_over_peak(model, folded) < 1e-6


def test_the_floor_is_the_folded_models_floor_bit_for_bit():
    model = conv_bn(as_constants=True)
    rounded = floor_model(model)
    assert not any(n.op_type == "BatchNormalization" for n in rounded.graph.node)
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    fold_conv_batchnorms(folded)
    name = model.graph.output[0].name
    np.testing.assert_array_equal(run_ort(rounded, _feed())[name],
                                  run_ort(floor_model(folded), _feed())[name])


def test_a_shared_conv_output_is_not_folded():
    """The Conv's output read by the BatchNormalization and by a graph output: the device
    computes the Conv alone too; nothing folded."""
    model = conv_bn()
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    model.graph.output.append(helper.make_tensor_value_info(conv.output[0], 1, None))
    assert fold_conv_batchnorms(model) == 1  # the second pair only


def test_a_recentring_batchnorm_is_judged_against_its_folded_floor(tmp_path):
    """The first Conv's output sits near 1000 and its BatchNormalization subtracts 1000: the
    model's own tensors rounded lose the signal (fp16's step at 1000 is 0.5), the folded Conv
    (b' = beta) does not. The converted artifact, which folds, is within 3x of the folded
    floor (on it: 0.00075 of the peak); the unfolded floor was 0.13 of the peak, 178x."""
    model = conv_bn(offset=1000.0)
    mrvl_convert.convert(model, tmp_path / "art")
    feeds = [_feed(k) for k in range(3)]
    row = compare(model, tmp_path / "art", feeds).judged_rows[0]
    assert row.floor_max_rel is not None and row.floor_max_rel < 0.01
    assert row.max_abs <= 3 * row.floor_max_abs
