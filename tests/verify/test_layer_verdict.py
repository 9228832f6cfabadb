"""The layer rows' verdict says how many layers were compared and why the others were not
(issue 30): an int8 artifact compared layer by layer with the float model it was quantized
from has every layer skipped (their QuantizeLinear/DequantizeLinear source nodes are not in
it), and must not read "every compared layer is within tolerance"."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.verify.report import Comparison, Row
from support.rewrites import sum_of_three

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_cnn"
MODEL = EXAMPLE / "mnist_cnn.onnx"


@pytest.fixture(scope="module")
def int8_artifact(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("int8_layers")
    images = np.load(EXAMPLE / "heldout.npz")["images"]
    qdq = quantize_int8(MODEL, tmp / "q.onnx", {"input": images[:16]})
    mrvl_convert.convert(qdq, tmp / "out")
    return qdq, tmp / "out", {"input": images[300:301]}


def test_every_layer_skipped_is_said_with_the_reason(int8_artifact):
    _, out, feed = int8_artifact
    report = mrvl_convert.compare(MODEL, out, feed, layers=True)
    layers = [r for r in report.rows if r.kind == "layer"]
    assert layers and all(r.tolerance is None for r in layers)  # the premise: all skipped
    table = report.format_table()
    assert "every compared layer is within tolerance" not in table
    assert f"0 of {len(layers)} layer(s) compared, {len(layers)} skipped" in table
    assert "QuantizeLinear/DequantizeLinear source node" in table and "--quant-analysis" in table
    assert "no layer was compared" in table


def test_layers_compared_against_the_qdq_model_are_counted(int8_artifact):
    qdq, out, feed = int8_artifact
    table = mrvl_convert.compare(qdq, out, feed, layers=True).format_table()
    counted = re.search(r"(\d+) of (\d+) layer\(s\) compared; every compared layer is within "
                        r"tolerance", table)
    assert counted and counted.group(1) == counted.group(2) != "0"


def test_some_skipped_some_over():
    tol = {"atol": 0.0, "max_rel": 0.01, "min_cosine": 0.999, "min_top1": 0.99}
    rows = [Row("y", "output", [1], 0.0, 0.0, 1.0, tolerance=tol),
            Row("a", "layer", [1], 0.0, 0.0, 1.0, tolerance=tol, note="L1"),
            Row("b", "layer", [1], 1.0, 1.0, 0.5, tolerance=tol, passed=False,
                note="L2"),
            Row("c", "layer", [1], note="L3: not compared: source node 'n' is not in the "
                                       "original model")]
    line = Comparison(rows, 1).format_table().splitlines()[-1]
    assert line == ("layer rows are diagnostics, not part of the verdict; 2 of 3 layer(s) "
                    "compared, 1 skipped (1: a source node the model does not have); the first "
                    "layer outside tolerance is b (L2)")


def test_a_layer_of_a_node_canonicalization_added_is_compared(tmp_path):
    """fp16, ``compare(..., layers=True)``: the first Add of a Sum of three inputs is a node
    the model does not have; it is compared with its partial sum (the rewrite is exact), not
    skipped."""
    src = tmp_path / "sum.onnx"
    onnx.save(sum_of_three(), src)
    mrvl_convert.convert(src, tmp_path / "out")
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    report = mrvl_convert.compare(src, tmp_path / "out", {"x": x}, layers=True)
    layers = {r.tensor: r for r in report.rows if r.kind == "layer"}
    partial = next(r for t, r in layers.items() if "partial" in t)
    assert partial.tolerance is not None and partial.passed and partial.max_abs > 0
    assert all(r.tolerance is not None for r in layers.values())
