"""Elu (madmom's beats_tcn and key_cnn) runs on the accelerator as Relu, Sub, Mul2D, Tanh,
Mul2D, Sum2D, Power(-1), Mul2D, Mul2D, Sum2D (layers/_elu.py): the hybrid run against
onnxruntime within the module's bound, exact for x >= 0, else 7 u |Elu(x)| (1 + 7u) + 2**-25
(5 alpha + 1) (the subnormal roundings). Before: "Elu goes to the accelerator only fused into
a composite (mrvl.qnn_...)"."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from support.layer_chains import SHAPE, front_conv, layer_kinds
from support.models import Builder, run_ort
from support.onnxref import fp16_round

U = 2.0 ** -11


@pytest.mark.parametrize("alpha", [1.0, 0.3])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 20.0])
def test_elu_is_on_mrvl_within_the_bound(tmp_path, alpha, scale):
    b = Builder()
    model = b.model([b.op("Elu", [front_conv(b)], name="elu", alpha=alpha)])
    x = fp16_round(np.random.default_rng(4).standard_normal(SHAPE) * scale)
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert layer_kinds(result)[-10:] == ["Relu", "Sub", "Mul2D", "Tanh", "Mul2D", "Sum2D",
                                         "Power", "Mul2D", "Mul2D", "Sum2D"]
    assert result.manifest["codegen"] != "v0.19"
    [got] = HybridSession(result.out_dir, threads=1).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    np.testing.assert_array_equal(got[x >= 0], want[x >= 0])
    bound = 7 * U * np.abs(want) * (1 + 7 * U) + 2.0 ** -25 * (5 * alpha + 1)
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))
