"""``quantize_int8(..., ranges=FILE)``: the activation ranges of the first calibration are kept
and read back by later calls (``--keep-fp16 auto``'s trials: one float run per sample, not one
per trial), where onnxruntime's ``quantize_static`` takes a ``calibration_cache_path``."""
from __future__ import annotations

import inspect

import numpy as np
import onnx
import pytest
from onnx import helper

from mrvl_convert.quantize.recipe import quantize_int8
from support.int8 import float_model

pytestmark = pytest.mark.skipif(
    "calibration_cache_path" not in inspect.signature(
        __import__("onnxruntime.quantization", fromlist=["quantize_static"]).quantize_static
    ).parameters, reason="this onnxruntime's quantize_static keeps no calibration ranges")


def conv_relu_conv() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2")]
    return float_model(nodes, {"w1": rng.standard_normal((4, 3, 3, 3)),
                               "w2": rng.standard_normal((2, 4, 1, 1))}, [1, 3, 6, 6],
                       [1, 2, 6, 6])


def scales(path) -> dict:
    return {i.name: onnx.numpy_helper.to_array(i).tobytes()
            for i in onnx.load(str(path)).graph.initializer if i.name.endswith("_scale")}


def test_a_second_call_reads_the_ranges_instead_of_calibrating(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(conv_relu_conv(), src)
    x = np.random.default_rng(1).standard_normal((8, 3, 6, 6)).astype(np.float32)
    ranges = tmp_path / "ranges.json"
    first = quantize_int8(src, tmp_path / "a.onnx", {"x": x}, ranges=ranges)
    assert ranges.is_file()
    # ten times the samples: calibrated anew the scales would be ten times as large
    again = quantize_int8(src, tmp_path / "b.onnx", {"x": 10 * x}, ["conv2"], ranges=ranges)
    fresh = quantize_int8(src, tmp_path / "c.onnx", {"x": 10 * x}, ["conv2"])
    kept = {k: v for k, v in scales(first).items() if k in scales(again)}
    assert kept and scales(again) == kept != {k: scales(fresh)[k] for k in kept}
