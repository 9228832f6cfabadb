"""RMSNorm encoders as exporters write them (issue 45 finding 6): T5's
``x * Div(1, Sqrt(mean(Pow(x, 2)) + eps))`` and ``Div(x, Pow(v, 0.5))`` between the FCs of a
pre-norm encoder convert to ONE Mrvl subgraph and verify passes (before: every norm cut the
model, "the dividend [] must be an activation of the output's shape"); a magnitude
``Sqrt(re**2 + im**2)`` squared again (DNSMOS's log-power front end) stays on the accelerator
between its Convs (before: "Sqrt goes to the accelerator only fused into a composite")."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.models import Builder
from support.strategies.norms import SPELLINGS, norms_from_spec

pytestmark = pytest.mark.system


@pytest.mark.parametrize("norm", SPELLINGS)
def test_an_rmsnorm_encoder_is_one_mrvl_subgraph_and_verifies(tmp_path, norm):
    case = norms_from_spec({"seed": 0, "opset": 13, "tokens": 8, "channels": 16, "blocks": 2,
                            "norm": norm, "pow2": True, "eps": 1e-6, "scale": 1.0})
    result = mrvl_convert.convert(case.model, tmp_path / "art")
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds == ["mrvl"], (kinds, [(n["name"], n.get("reason")) for n in
                                       result.report["nodes"] if n["placement"] == "cpu"])
    assert compare(case.model, tmp_path / "art", [case.feeds]).passed


def test_a_standalone_sqrt_between_convs_stays_on_the_accelerator(tmp_path):
    b = Builder(opset=13)
    x = b.input("x", [1, 1, 8, 32])
    re, im = b.conv(x, 1, 8, pads=[1, 1, 1, 1]), b.conv(x, 1, 8, pads=[1, 1, 1, 1])
    power = b.op("Add", [b.op("Mul", [re, re]), b.op("Mul", [im, im])])
    magnitude = b.op("Sqrt", [power], name="magnitude")
    y = b.op("Pow", [magnitude, b.const(np.array(2.0, np.float32))], name="square")
    model = b.model([b.conv(b.op("Relu", [y]), 8, 4, pads=[1, 1, 1, 1])])
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert result.placement("magnitude")["placement"] == "mrvl"
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 1, 8, 32)).astype(np.float32)}
    assert compare(model, tmp_path / "art", [feeds]).passed
