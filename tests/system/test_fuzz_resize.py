"""Property tests over small CNNs with a linear Resize (tests/support/strategies/resize.py): the
canonical graph computes on onnxruntime what the model does within the rewrite's stated bound,
and the converted model is one Mrvl subgraph whose hybrid run is within the fp16 tolerance of
onnxruntime."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from hypothesis import event, given, settings

from mrvl_convert import HybridSession, convert
from mrvl_convert.frontend.linear_resize import axis_filter
from support.backend_cases import assert_fp16_close
from support.models import canonicalized, run_ort
from support.strategies.resize import ResizeCase, resize_cases

pytestmark = pytest.mark.system
U = 2.0 ** -24


def _bound(case: ResizeCase, rewritten: str) -> float:
    """The stated bound in units of u max|x|: the matrix form's 8, or the box-filter form's
    (2 kh kw + 8)."""
    if "MatMul" in rewritten:
        return 8
    kh, kw = (len(axis_filter(n, m, case.mode)[1]) for n, m in zip(case.src, case.dst))
    return 2 * kh * kw + 8


@settings(deadline=None)
@given(resize_cases())
def test_rewrite_within_its_bound(case):
    model = case.model()
    canonical, proto = canonicalized(model)
    assert "up" in canonical.rewritten, canonical.kept.get("up")
    event("matrix form" if "MatMul" in canonical.rewritten["up"] else "box-filter form")
    feed, resized = case.feed(), model.graph.output[1].name
    want, got = run_ort(model, feed, optimize=False), run_ort(proto, feed, optimize=False)
    # The Resize reads the Relu's output, which both graphs compute alike.
    relu = next(n for n in model.graph.node if n.op_type == "Relu").output[0]
    x_peak = float(np.abs(_tensor(model, relu, feed)).max())
    err = float(np.abs(got[resized].astype(np.float64) - want[resized]).max())
    what = canonical.rewritten["up"]
    assert err <= _bound(case, what) * U * x_peak, (err, x_peak, what)


def _tensor(model: onnx.ModelProto, name: str, feed) -> np.ndarray:
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return run_ort(probe, feed, optimize=False)[name]


@settings(deadline=None, max_examples=8)
@given(resize_cases())
def test_converted_is_one_subgraph_within_fp16(case):
    model = case.model()
    with tempfile.TemporaryDirectory() as tmp:
        result = convert(model, Path(tmp) / "a")
        got = HybridSession(Path(tmp) / "a").run(None, case.feed())
    want = run_ort(model, case.feed(), optimize=False)
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    for k, output in enumerate(model.graph.output):
        assert_fp16_close(got[k], want[output.name], f"{case} {output.name}")
