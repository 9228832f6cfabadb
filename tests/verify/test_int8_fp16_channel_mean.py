"""An fp16 ReduceMean over an image's channels inside an int8 region (a LayerNorm over channels,
its QDQ pairs dropped: ``frontend/float_pairs.py``) is reduced by the artifact over the last axis
of NHWC, where the QDQ model reduces axis 1 of NCHW; onnxruntime sums a contiguous axis in
another order than a strided one, and now and then the float32 sums are one step apart and land
on neighbouring fp16 values. verify's reference reduces as the layer does
(``verify/fp16_chains.py``, ``mean_as_laid_out``): on main the mean below (a graph output, so
compared as it leaves the layer) was one fp16 step off its reference (5.96e-08, a subnormal
step), and LEADER's int8 artifact, whose LayerNorms run so since our recipe drops those pairs,
FAILed against its own QDQ model (head_conc, max_rel 2.0: its atan2 head turns one int8 step
into a wrapped angle); both are bit-equal now."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.foreign_qdq import foreign_quantized
from support.int8 import converted_int8
from support.models import Builder

C, SIDE = 32, 64


def channel_layer_norm() -> onnx.ModelProto:
    """Conv, a LayerNorm over the channels written out (ReduceMean, Sub, Mul, ReduceMean, Add
    eps, Sqrt, Div, Mul gamma, Add beta), Conv; the first mean is an output too."""
    b = Builder(4)
    y = b.conv(b.input("x", [1, 8, SIDE, SIDE]), 8, C, k=1)
    mean = b.op("ReduceMean", [y], axes=[1], keepdims=1)
    d = b.op("Sub", [y, mean])
    v = b.op("ReduceMean", [b.op("Mul", [d, d])], axes=[1], keepdims=1)
    n = b.op("Div", [d, b.op("Sqrt", [b.op("Add", [v, b.const(np.array(1e-3, np.float32))])])])
    n = b.op("Mul", [n, b.const((1 + 0.2 * b.rng.standard_normal((1, C, 1, 1))).astype(
        np.float32))])
    n = b.op("Add", [n, b.const((0.2 * b.rng.standard_normal((1, C, 1, 1))).astype(np.float32))])
    return b.model([b.conv(n, C, 8, k=1), mean])


def _feeds(count: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(-1, 1, [1, 8, SIDE, SIDE]).astype(np.float32)}
            for _ in range(count)]


def _converted(how: str, folder: Path):
    model = channel_layer_norm()
    if how == "ours":
        return converted_int8(model, folder)
    # the 8 samples after the 4 compared, from one generator
    given = foreign_quantized(model, per_channel=False, activation="QInt8",
                              feeds=_feeds(12, seed=5)[4:])
    result = mrvl_convert.convert(given, folder)
    return result, folder / result.manifest["foreign_int8"]["file"]


@pytest.mark.parametrize("how", ["ours", "foreign"])
def test_an_fp16_channel_mean_is_reduced_as_the_layer_reduces_it(how, tmp_path) -> None:
    result, qdq = _converted(how, tmp_path / "a")
    means = [e for e in result.placements if e["op_type"] == "ReduceMean"]
    assert len(means) == 2 and all(e.get("rule") == "mrvl.reduce_mean" for e in means), means
    verdict = compare(qdq, result.out_dir, _feeds(4, seed=5), with_floor=False)
    outputs = [row for row in verdict.rows if row.kind == "output"]
    assert len(outputs) == 2 and all(row.max_abs == 0.0 for row in outputs), \
        [(row.tensor, row.max_abs) for row in outputs]
    assert verdict.passed, verdict.summary_line()
