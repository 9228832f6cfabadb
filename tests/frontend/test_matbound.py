"""No rewrite writes a constant that grows with the square of an axis (``pad_forms.MAX_SELECTION``
bounds every selection or interpolation matrix): a long reversed Slice becomes strips of bounded
``[b, b]`` flips (frontend/slice_forms.py), bit-equal on onnxruntime; a linear Resize whose
interpolation matrix would exceed the bound becomes MatMuls by bounded blocks in output strips,
within resize_matrices.py's bound of onnxruntime (frontend/resize_strips.py). On integ11 both
wrote an ``[n, n]`` (``[n, n']``) matrix."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from mrvl_convert import convert
from mrvl_convert.frontend.pad_forms import MAX_SELECTION
from mrvl_convert.frontend.resize_matrices import interpolation_weights
from support.models import Builder, canonicalized, run_ort
from support.whole_mrvl import assert_whole_mrvl

BIG = 2 ** 63 - 1


def _reversed(shape, starts, ends, axes, steps, conv_around=False):
    b = Builder(seed=0, opset=13)
    x = b.input("x", shape)
    a = b.op("Relu", [b.conv(x, shape[1], shape[1], k=1) if conv_around else x])
    y = b.op("Slice", [a] + [b.const(np.array(v, np.int64)) for v in (starts, ends, axes,
                                                                         steps)], name="slice")
    return b.model([b.conv(y, shape[1], 2, k=1) if conv_around else y])


def _feed(shape, seed=4):
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3, shape))
            .astype(np.float32)}


def _largest_constant(model: onnx.ModelProto) -> int:
    return max(int(np.prod(t.dims)) for t in model.graph.initializer)


LONG = [
    ([1, 1, 1, 3000], [-1], [-BIG], [3], [-1]),             # a waveform flipped, on W
    ([1, 2, 2500, 3], [-3], [0], [2], [-1]),                # H, cropped first
    ([1, 1100, 1, 2], [-1], [-BIG], [1], [-1]),             # channels: the channel Concat
    ([1, 2, 3, 2100], [BIG, 2000], [-BIG, 5], [1, 3], [-1, -2]),  # W cropped short, C short
    ([1, 2, 1500], [-1], [-BIG], [2], [-1]),                # 3-D, on its 4-D view
    ([2, 1200], [-1], [-BIG], [1], [-1]),                   # 2-D: its channels
]


@pytest.mark.parametrize("shape,starts,ends,axes,steps", LONG)
def test_a_long_reversal_is_bit_equal_and_bounded(shape, starts, ends, axes, steps):
    model = _reversed(shape, starts, ends, axes, steps)
    canonical, proto = canonicalized(model)
    assert "slice" in canonical.rewritten, canonical.kept
    assert _largest_constant(proto) <= MAX_SELECTION
    feed = _feed(shape)
    want, got = (next(iter(run_ort(m, feed).values())) for m in (model, proto))
    assert want.shape == got.shape and np.array_equal(want, got)


def test_a_long_reversal_of_a_5d_tensor_stays_with_its_size():
    canonical, proto = canonicalized(_reversed([1, 2, 1, 3, 1100], [-1], [-BIG], [4], [-1]))
    assert "1100 x 1100 reversal matrix" in canonical.kept["slice"]
    assert [n.op_type for n in proto.graph.node] == ["Relu", "Slice"]


def test_a_long_reversal_between_convs_is_one_mrvl_subgraph(tmp_path: Path):
    shape = [1, 2, 1, 2100]
    assert_whole_mrvl(_reversed(shape, [-1], [-BIG], [3], [-1], conv_around=True), tmp_path,
                      _feed(shape), "a long reversed W")


def _resized(shape, sizes):
    b = Builder(seed=0, opset=13)
    x = b.input("x", shape)
    y = b.op("Resize", [b.op("Relu", [x]), b.const(np.zeros(0, np.float32)),
                        b.const(np.zeros(0, np.float32)), b.const(np.array(sizes, np.int64))],
             name="resize", mode="linear", coordinate_transformation_mode="half_pixel")
    return b.model([y])


def _window_bound(x: np.ndarray, shape, sizes) -> np.ndarray:
    """resize_matrices.py's bound per output of a W-only resize: 8 2**-24 max|x| over the two
    samples it reads."""
    low, high = interpolation_weights(shape[3], sizes[3], "half_pixel",
                                      float(np.float32(sizes[3]) / np.float32(shape[3])))[:2]
    return 8 * 2.0 ** -24 * np.maximum(np.abs(x[..., low]), np.abs(x[..., high]))


@pytest.mark.parametrize("shape,sizes", [([1, 2, 3, 1500], [1, 2, 3, 1700]),
                                         ([1, 1, 1, 1200000], [1, 1, 1, 1])])
def test_a_long_linear_resize_is_in_bounded_strips(shape, sizes):
    model = _resized(shape, sizes)  # a non-integer factor or a shrink: the MatMul form's
    canonical, proto = canonicalized(model)
    assert "strips" in canonical.rewritten["resize"], canonical.kept
    assert _largest_constant(proto) <= MAX_SELECTION
    feed = _feed(shape)
    want, got = (next(iter(run_ort(m, feed).values())) for m in (model, proto))
    assert want.shape == got.shape
    assert (np.abs(want - got) <= _window_bound(feed["x"], shape, sizes)).all()


def test_a_long_linear_resize_along_h_is_in_bounded_strips():
    shape, sizes = [1, 2, 1500, 3], [1, 2, 1700, 3]
    model = _resized(shape, sizes)
    canonical, proto = canonicalized(model)
    assert "strips" in canonical.rewritten["resize"] and _largest_constant(proto) <= MAX_SELECTION
    feed = _feed(shape)
    want, got = (next(iter(run_ort(m, feed).values())) for m in (model, proto))
    turned = {"x": feed["x"].transpose(0, 1, 3, 2)}
    bound = _window_bound(turned["x"], [1, 2, 3, 1500], [1, 2, 3, 1700]).transpose(0, 1, 3, 2)
    assert (np.abs(want - got) <= bound).all()


def test_a_large_shrink_takes_shorter_strips():
    shape, sizes = [1, 1, 1, 400000], [1, 1, 1, 3000]  # 1024 outputs would read 136 k inputs
    model = _resized(shape, sizes)
    canonical, proto = canonicalized(model)
    assert "strips" in canonical.rewritten["resize"] and _largest_constant(proto) <= MAX_SELECTION
    feed = _feed(shape)
    want, got = (next(iter(run_ort(m, feed).values())) for m in (model, proto))
    assert (np.abs(want - got) <= _window_bound(feed["x"], shape, sizes)).all()


def test_a_long_linear_resize_converts_without_a_large_constant(tmp_path: Path):
    model = _resized([1, 1, 1, 1500], [1, 1, 1, 1700])
    convert(model, tmp_path)
    parts = [onnx.load(str(f)) for f in tmp_path.rglob("*.onnx")]
    assert parts and max(_largest_constant(p) for p in parts) <= MAX_SELECTION  # integ11: 2.55 M


def test_a_short_linear_resize_keeps_the_matmul_form():
    canonical, proto = canonicalized(_resized([1, 1, 1, 600], [1, 1, 1, 700]))
    assert "MatMul" in canonical.rewritten["resize"]
    assert "MatMul" in [n.op_type for n in proto.graph.node]


def test_a_long_linear_resize_between_convs_is_one_mrvl_subgraph(tmp_path: Path):
    b = Builder(seed=0, opset=13)
    x = b.input("x", [1, 2, 1, 1500])
    a = b.op("Relu", [b.conv(x, 2, 2, k=1)])
    y = b.op("Resize", [a, b.const(np.zeros(0, np.float32)), b.const(np.zeros(0, np.float32)),
                        b.const(np.array([1, 2, 1, 1700], np.int64))], mode="linear")
    assert_whole_mrvl(b.model([b.conv(y, 2, 2, k=1)]), tmp_path, _feed([1, 2, 1, 1500]),
                      "a long linear Resize in strips")
