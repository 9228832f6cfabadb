"""``--keep-fp32 auto`` on a model whose canonical form has a tensor the model lacks (a Sub
from a constant is ``Add(Mul(y, -1), c)``; a norm's rewrites add nodes too): the fp16
analysis measures weights only at tensors the model has, so auto runs (it failed with
ModelLoadError, onnxruntime asked for ``..._negated``) and brings an overflowing model's verify
from FAIL to PASS."""
from __future__ import annotations

import numpy as np
import onnx

from mrvl_convert.tune.keep_fp32 import convert_keep_fp32
from mrvl_convert.verify.fp16_analysis import analyze_fp16
from mrvl_convert import convert
from support.models import Builder


def overflowing_shift_model() -> onnx.ModelProto:
    """An FC whose outputs reach ~1e5 (beyond fp16), shifted as ``c - y`` and scaled back."""
    b = Builder(seed=5)
    x = b.input("x", [1, 64])
    h = b.op("MatMul", [x, b.weight(64, 32, scale=1e4)], name="big_fc")
    shift = b.const((b.rng.standard_normal((1, 32)) * 10).astype(np.float32), "shift")
    h = b.op("Sub", [shift, h], name="shifted")
    h = b.op("Relu", [b.op("Mul", [h, b.const(np.array(1e-4, np.float32))], name="scaled")])
    return b.model([b.op("MatMul", [h, b.weight(32, 8)], name="head")])


def _feeds(count: int):
    return [{"x": np.random.default_rng(k).standard_normal((1, 64)).astype(np.float32)}
            for k in range(count)]


def test_fp16_analysis_runs_where_a_layer_is_a_rewritten_forms(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(overflowing_shift_model(), path)
    convert(path, tmp_path / "plain")
    analysis = analyze_fp16(path, tmp_path / "plain", _feeds(2))
    assert analysis.layers.rows   # measured, no ModelLoadError
    result = convert_keep_fp32(path, tmp_path / "art", "auto", verify=None)
    assert result.before["passed"] is False and result.after["passed"] is True
    assert "big_fc" in result.kept
