"""``Max(c, x)`` / ``Min(c, x)`` of one constant value become ``op(x, c)`` (canonical_forms.py):
bit for bit on onnxruntime, NaNs and zeros of both signs included, and the Clip rule
(``mrvl.min_max_const``, bound at input 1) takes them. speechmos' sig_bak_ovr writes
``Max(1e-12, power)``: on main its reason was "input 1 is not a constant"; now it names the
real obstacle, a bound fp16 cannot hold."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from support.layer_chains import SHAPE, front_conv
from support.models import Builder, canonicalized, run_ort


def _feed():
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32) * 3
    x.reshape(-1)[:5] = [0.0, -0.0, np.inf, -np.inf, np.nan]
    return {"x": x}


@pytest.mark.parametrize("op,c", [("Max", 0.5), ("Max", 1e-12), ("Min", 0.5), ("Min", -0.0),
                                  ("Min", 0.0)])  # Max(0, x) is a Relu (its own rewrite)
def test_constant_first_becomes_constant_last_bit_exact(op, c):
    b = Builder()
    x = b.input("x", SHAPE)
    model = b.model([b.op(op, [b.const(np.array(c, np.float32)), x], name="pick")])
    canonical, rewritten = canonicalized(model)
    node = next(n for n in canonical.graph.nodes if n.name == "pick")
    assert node.op == op and node.inputs[0].name == "x", node
    assert "pick" in canonical.rewritten
    feed = _feed()
    assert run_ort(rewritten, feed)[model.graph.output[0].name].tobytes() == \
        run_ort(model, feed)[model.graph.output[0].name].tobytes()


def _placement(tmp_path, c):
    b = Builder()
    f = front_conv(b)
    model = b.model([b.op("Max", [b.const(np.array(c, np.float32)), f], name="pick")])
    result = mrvl_convert.convert(model, tmp_path / "o")
    return next(e for e in result.report["nodes"] if e["name"] == "pick")


def test_a_max_with_the_constant_first_is_a_clip_on_mrvl(tmp_path):
    entry = _placement(tmp_path, 0.5)
    assert entry["placement"] == "mrvl" and entry["rule"] == "mrvl.min_max_const", entry


def test_a_bound_below_fp16_says_so(tmp_path):
    entry = _placement(tmp_path, 1e-12)
    assert entry["placement"] == "cpu" and "six decimals" in entry["reason"], entry
