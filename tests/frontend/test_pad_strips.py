"""A reflect/edge Pad of a long axis as edge strips (frontend/pad_strips.py): bit-equal to the
Pad on onnxruntime, and no constant of the canonical graph grows with the axis (main wrote a
``[n, n + b + e]`` selection matrix: basic-pitch's 43844-sample reflect pad, 7.2 GiB)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_graphsurgeon as gs
import pytest

from mrvl_convert import HybridSession, convert
from mrvl_convert.frontend.pad_forms import MAX_SELECTION
from support.backend_cases import assert_fp16_close
from support.models import Builder, canonicalized, run_ort
from support.strategies.padbound import canonical_bit_equal


def _long_pad(shape, pads, mode):
    """x -> Relu -> Pad -> Relu: the Pad reads and feeds activations (``mode``: reflect, edge,
    constant, or ``constant-<value>``)."""
    b = Builder(seed=0, opset=13)
    x = b.op("Relu", [b.input("x", shape)])
    mode, _, value = mode.partition("-")
    extra = [b.const(np.array(float(value), np.float32))] if value else []
    y = b.op("Pad", [x, b.const(np.array(pads, np.int64))] + extra, name="pad", mode=mode)
    return b.model([b.op("Relu", [y])])


def _feed(shape, seed=3):
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3, shape))
            .astype(np.float32)}


def _largest_constant(graph: gs.Graph) -> int:
    return max((t.values.size for t in graph.tensors().values()
                if isinstance(t, gs.Constant)), default=0)


CASES = [
    # shape, pads, mode: each pads an axis whose pad_forms matrix exceeds MAX_SELECTION
    ([1, 2, 1200], [0, 0, 128, 0, 0, 128], "reflect"),      # basic-pitch's CQT form, W
    ([1, 2, 1200], [0, 0, 5, 0, 0, 0], "edge"),             # begin only
    ([1, 2, 1100, 3], [0, 0, 7, 1, 0, 0, 2, 0], "reflect"),  # H long (Transposes), W short
    ([1, 1100, 4], [0, 3, 0, 0, 2, 0], "reflect"),          # the channel axis (Concat)
    ([1, 2, 1300], [0, 0, -40, 0, 0, 9], "edge"),           # cropped, then padded
    ([1, 1100], [0, 3, 0, 2], "edge"),                      # rank 2: [N, C], C long
    ([1, 1100], [0, 3, 0, 2], "constant"),                  # zeros: a [C', C] weight on main
    ([1, 1100], [0, -5, 0, 2], "constant-1.5"),              # cropped, the value 1.5
    ([1, 1100, 3], [0, 1, 2, 0, 0, 1], "constant--2"),       # channels, then W with the value
]


@pytest.mark.parametrize("shape,pads,mode", CASES)
def test_the_strips_are_bit_equal_to_the_pad_and_bounded(shape, pads, mode):
    canonical = canonical_bit_equal(_long_pad(shape, pads, mode), _feed(shape))
    assert "became" in canonical.rewritten.get("pad", ""), canonical.kept
    # The strips' selections are pad-sized; main's matrix was [n, n + b + e] > MAX_SELECTION.
    out = [n + b + e for n, b, e in zip(shape, pads, pads[len(shape):])]
    assert _largest_constant(canonical.graph) <= max(max(pads) ** 2, max(out)), \
        _largest_constant(canonical.graph)


def test_a_short_axis_keeps_the_selection_matmul():
    canonical, proto = canonicalized(_long_pad([1, 2, 40], [0, 0, 3, 0, 0, 3], "reflect"))
    assert [n.op_type for n in proto.graph.node] == ["Relu", "Unsqueeze", "MatMul", "Squeeze",
                                                     "Relu"]
    assert _largest_constant(canonical.graph) == 40 * 46 <= MAX_SELECTION


@pytest.mark.parametrize("shape,pads,value", [
    ([1, 2, 1, 1500], [0, 0, 0, 128, 0, 0, 0, 128], None),  # reflect: main 1500 x 1756
    ([1, 1100, 2, 2], [0, 3, 0, 0, 0, 2, 0, 0], 0.5),       # constant: main 1105 x 1100
])
def test_a_long_pad_converts_to_one_mrvl_subgraph(tmp_path: Path, shape, pads, value):
    """basic-pitch's front end: Conv -> Pad of a long axis -> Conv."""
    b = Builder(seed=0, opset=13)
    x = b.input("x", shape)
    a = b.op("Relu", [b.conv(x, shape[1], shape[1], k=1, group=shape[1])])  # depthwise
    extra = [b.const(np.array(value, np.float32))] if value is not None else []
    y = b.op("Pad", [a, b.const(np.array(pads, np.int64))] + extra, name="pad",
             mode="reflect" if value is None else "constant")
    model = b.model([b.conv(y, shape[1] + pads[1] + pads[5], 2, k=1)])
    result = convert(model, tmp_path / "a")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0), \
        result.summary
    largest = max(p.stat().st_size for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert largest < 4 * MAX_SELECTION  # main: the selection matrix, over 10 MB of JSON
    feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    got = HybridSession(tmp_path / "a").run(None, feed)[0]
    assert_fp16_close(got, next(iter(run_ort(model, feed, optimize=False).values())),
                      "long pad")
