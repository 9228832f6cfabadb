"""Property tests over random CNNs in the stored forms of issue 45's findings 1 and 4
(tests/support/strategies/dtype.py): float16 models (all float16, or float16 weights Cast up)
and opset-9 graphs.

- convert() succeeds or raises MrvlConvertError, as it does on the float32 / opset-11 model;
- a float16 model has the partition of its float32 twin (the same Mrvl and CPU subgraphs and
  nodes), its artifact takes and gives the dtypes the model declares;
- the hybrid run is within the fuzz tests' fp16 tolerance of onnxruntime on the model as given.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import assume, event, given, note, settings

import mrvl_convert
from mrvl_convert import MrvlConvertError
from mrvl_convert.runtime import HybridSession
from support.strategies.cnn import policies
from support.strategies.dtype import float16_models, opset9_models

pytestmark = pytest.mark.system

_SUMMARY = ("mrvl_subgraphs", "cpu_subgraphs", "mrvl_nodes", "cpu_nodes")


def tolerance(ref: np.ndarray) -> float:
    """test_fuzz_pipeline's bound (fp16 roundings, a few 1e-3 of the magnitude, 10x margin);
    the float16 original adds its own roundings of the same size."""
    return 2e-2 * max(1.0, float(np.max(np.abs(ref), initial=0.0)))


def _ort(model: onnx.ModelProto, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _convert(model, out: Path, policy: str, shapes):
    try:
        return mrvl_convert.convert(model, out, policy=policy, shapes=shapes)
    except MrvlConvertError as exc:
        return exc


def _check_run(out: Path, model: onnx.ModelProto, feeds) -> None:
    try:
        want = _ort(model, feeds)
    except Exception as exc:  # onnxruntime has no float16 CPU kernel for some op
        event(f"onnxruntime cannot run the stored model: {type(exc).__name__}")
        return
    session = HybridSession(out)
    got = session.run(None, feeds)
    declared = {o.name: o.type for o in session.get_outputs()}
    for spec, ref, value in zip(session.get_outputs(), want, got):
        assert value.dtype == ref.dtype, (spec.name, value.dtype, ref.dtype, declared)
        err = float(np.max(np.abs(value.astype(np.float64) - ref.astype(np.float64)),
                           initial=0.0))
        assert err <= tolerance(ref), f"output {spec.name}: {err:.4g} > {tolerance(ref):.4g}"


@settings(max_examples=max(4, settings.default.max_examples // 4))
@given(sm=float16_models(), policy=policies())
def test_a_float16_model_converts_as_its_float32_twin(sm, policy):
    note(sm.generated.description)
    event(sm.form)
    shapes = sm.generated.shapes
    with tempfile.TemporaryDirectory() as tmp:
        ours = _convert(sm.model, Path(tmp) / "ours" / "m", policy, shapes)
        twin = _convert(sm.twin, Path(tmp) / "twin" / "m", policy, shapes)
        assert isinstance(ours, MrvlConvertError) == isinstance(twin, MrvlConvertError), \
            (ours, twin)
        if isinstance(ours, MrvlConvertError):
            return
        assert {k: ours.summary[k] for k in _SUMMARY} == {k: twin.summary[k] for k in _SUMMARY}
        _check_run(ours.out_dir, sm.model, sm.feeds)


@settings(max_examples=max(4, settings.default.max_examples // 4))
@given(sm=opset9_models(), policy=policies())
def test_an_opset_9_graph_converts_and_runs_as_the_model_does(sm, policy):
    note(sm.generated.description)
    assume(sm.model is not None)
    with tempfile.TemporaryDirectory() as tmp:
        ours = _convert(sm.model, Path(tmp) / "old" / "m", policy, sm.generated.shapes)
        if isinstance(ours, MrvlConvertError):
            event(f"refused: {type(ours).__name__}")
            return
        assert ours.report["opset"]["given"] == 9
        event(ours.report["opset"]["note"].split(":")[0][:40])
        _check_run(ours.out_dir, sm.model, sm.feeds)
