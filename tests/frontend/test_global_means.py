"""A ReduceMean over H and W that drops them (sscd_distilled's GeM pool: "mrvl.reduce_mean: it
reduces axes [2, 3]; the layer reduces one axis") keeps them and is followed by a Flatten
(frontend/global_means.py): bit-equal on onnxruntime, and on the accelerator a
GlobalAvgpool2D."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from support.layer_chains import convert_and_compare, layer_kinds
from support.models import Builder, canonicalized, run_ort


def _model(opset: int, axes=(2, 3), keepdims: int = 0):
    b = Builder(opset=opset)
    y = b.op("Relu", [b.conv(b.input("x", [1, 3, 5, 6]), 3, 8)])
    if opset >= 18:
        mean = b.op("ReduceMean", [y, b.const(np.array(axes, np.int64))], keepdims=keepdims,
                    name="mean")
    else:
        mean = b.op("ReduceMean", [y], axes=list(axes), keepdims=keepdims, name="mean")
    return b.model([b.gemm(mean, 8, 4, transB=1) if keepdims == 0 and len(axes) == 2
                    else mean])


@pytest.mark.parametrize("opset", [13, 18])
def test_dropping_global_mean_is_kept_dims_and_flattened_bit_equal(tmp_path, opset):
    model = _model(opset)
    canonical, proto = canonicalized(model)
    assert "mean" in canonical.rewritten
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 5, 6)).astype(np.float32)}
    [after], [before] = run_ort(proto, feeds).values(), run_ort(model, feeds).values()
    np.testing.assert_array_equal(after, before)
    result = convert_and_compare(model, tmp_path)
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert "GlobalAvgpool2D" in layer_kinds(result)


@pytest.mark.parametrize("axes,keepdims", [((2,), 0), ((2, 3), 1), ((1,), 0)])
def test_other_means_are_left_alone(axes, keepdims):
    canonical, _ = canonicalized(_model(13, axes, keepdims))
    assert "mean" not in canonical.rewritten
