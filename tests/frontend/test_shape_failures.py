"""A Loop whose body defeats onnx's strict shape inference (slanet-plus's decoder) no longer
refuses the model: the backbone before it converts, the Loop and what only it shapes run on CPU
with onnx's message as their reason, and the artifact computes what onnxruntime computes on the
model (frontend/shape_failures.py). A plain node's own failure is still load's error."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import mrvl_convert
from mrvl_convert.errors import ArtifactError, InvalidModelError
from mrvl_convert.frontend.load import load_model
from mrvl_convert.frontend.shape_arithmetic import infer_model_shapes
from mrvl_convert.frontend.shape_failures import PlainFailure, infer_around
from support.loop_decoder import loop_decoder


def _feeds():
    rng = np.random.default_rng(3)
    return [{"x": np.full((1, 3, 8, 8), fill, np.float32)} for fill in (0.0, 1.0)] + [
        {"x": rng.random((1, 3, 8, 8), dtype=np.float32)} for _ in range(3)]


def _strict_error(model: onnx.ModelProto) -> Exception:
    with pytest.raises(Exception) as caught:
        infer_model_shapes(model, check_type=True, strict_mode=True)
    return caught.value


def test_strict_inference_refuses_the_model_but_onnxruntime_runs_it():
    """The premise: what the model does to onnx and to onnxruntime."""
    model = loop_decoder()
    assert "differ in rank" in str(_strict_error(onnx.ModelProto.FromString(
        model.SerializeToString())))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    lengths = {session.run(None, feed)[1].shape[0] for feed in _feeds()}
    assert len(lengths) > 1  # how many steps the Loop scans depends on the input


def test_the_backbone_converts_and_the_loop_runs_on_cpu_with_onnx_message(tmp_path):
    model = loop_decoder()
    result = mrvl_convert.convert(model, tmp_path / "out")
    placed = {n["name"]: n for n in result.report["nodes"]}
    assert {placed[n]["placement"] for n in ("conv", "relu", "pool", "flatten")} == {"mrvl"}
    assert placed["decoder"]["placement"] == "cpu"
    assert "onnx shape inference fails inside this Loop" in placed["decoder"]["reason"]
    assert "differ in rank: (1) vs (0)" in placed["decoder"]["reason"]
    assert placed["softmax"]["placement"] == "cpu"
    assert "'decoder'" in placed["softmax"]["reason"]
    assert result.report["summary"]["mrvl_subgraphs"] == 1
    assert result.report["summary"]["mrvl_mac_share"] == 1.0
    outputs = {o["name"]: o["shape"] for o in result.manifest["model"]["outputs"]}
    assert outputs == {"last": [1, 4], "steps": [None, 1, 4]}


def test_the_artifact_computes_what_onnxruntime_computes_on_the_model(tmp_path):
    model = loop_decoder()
    mrvl_convert.convert(model, tmp_path / "out")
    hybrid = mrvl_convert.HybridSession(tmp_path / "out")
    reference = ort.InferenceSession(model.SerializeToString(),
                                     providers=["CPUExecutionProvider"])
    for feed in _feeds():
        got, want = hybrid.run(None, feed), reference.run(None, feed)
        for a, b in zip(got, want):
            assert a.shape == b.shape  # as many steps as the model decodes
            np.testing.assert_allclose(a, b, rtol=2e-3, atol=1e-3)  # an fp16 backbone
    comparison = mrvl_convert.compare(model, tmp_path / "out", _feeds())
    assert comparison.passed
    assert {r.tensor for r in comparison.rows if r.kind == "output"} == {"last", "steps"}
    assert "?x1x4" in comparison.format_table()  # the steps' count, decided by each run


def test_a_plain_node_failing_inference_is_still_loads_error():
    model = loop_decoder(plain_failure=True)
    with pytest.raises(InvalidModelError, match="shape inference fails") as caught:
        load_model(model)
    assert "bad_add" in str(caught.value)


def test_infer_around_takes_only_control_flow_and_what_follows_it():
    model = load_model(loop_decoder()).proto
    assert set(load_model(loop_decoder()).shape_failures) == {"decoder"}
    plain = loop_decoder(plain_failure=True)
    plain_error = _strict_error(onnx.ModelProto.FromString(plain.SerializeToString()))
    found = infer_around(plain, plain_error, infer_model_shapes)
    assert isinstance(found, PlainFailure) and found.node == "bad_add"
    # onnx's inference of the rest: the backbone keeps its shapes
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in model.graph.value_info}
    assert shapes["feat"] == [1, 4]


def test_a_null_dim_on_a_mrvl_stage_output_is_refused(tmp_path):
    """Only a CPU stage's output may keep a dim the run decides: a Mrvl stage is compiled for
    static shapes."""
    mrvl_convert.convert(loop_decoder(), tmp_path / "out")
    path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["stages"][0]["outputs"][0]["shape"] = [None, 4]
    path.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="shape"):
        mrvl_convert.HybridSession(tmp_path / "out")


def test_a_node_after_the_loop_whose_shape_onnxruntime_tells_is_not_held_by_it(tmp_path):
    """Only what depends on shapes only the Loop knows is held on CPU for it: a Mul of the
    Loop's final state (static ``[1, C]``) is matched by its rule (and placed by the policy)."""
    result = mrvl_convert.convert(loop_decoder(tail=True), tmp_path / "out")
    placed = {n["name"]: n for n in result.report["nodes"]}
    # not held for the Loop (a light region's reason may name it as the CPU op it reads)
    assert "its shapes depend on" not in placed["double"]["reason"]
    assert "mrvl.mul" in placed["double"]["reason"]


def test_a_step_count_zeros_and_ones_agree_on_is_not_taken_for_the_shape(tmp_path):
    """After the Loop no run vouches for a dim: zeros and ones stop this one after one step,
    a negative input later, so the manifest says null, not 1, and the run decides."""
    model = loop_decoder(negative=True)
    result = mrvl_convert.convert(model, tmp_path / "out")
    outputs = {o["name"]: o["shape"] for o in result.manifest["model"]["outputs"]}
    assert outputs["steps"] == [None, 1, 4]
    feed = {"x": -np.random.default_rng(5).random((1, 3, 8, 8), dtype=np.float32)}
    got = mrvl_convert.HybridSession(tmp_path / "out").run(None, feed)[1]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[1]
    assert got.shape == want.shape and want.shape[0] > 1
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-3)
