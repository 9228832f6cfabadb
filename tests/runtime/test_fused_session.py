"""The whole hybrid as one onnxruntime session (runtime/fused.py): the same numbers as the stages
run one by one, the same range errors, and a stated reason wherever it does not apply."""
from __future__ import annotations

import threading
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.errors import Fp16RangeError
from mrvl_convert.runtime import HybridSession
from mrvl_convert.runtime.simulator import Fp16RangeWarning
from support import corpus_transformer
from support.models import conv_then_cpu_tail


def _sandwich(opset: int = 17) -> onnx.ModelProto:
    """Conv+Relu (Mrvl), Mod by a constant (CPU), Conv+Relu and a ReduceMean (Mrvl): three
    stages, a CPU stage between two Mrvl stages."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.random((1, 4, 8, 8)) + 0.5).astype(np.float32), "m"),
             numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")]
    mean_axes = {"axes": [1]} if opset < 18 else {}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Mod", ["r1", "m"], ["q"], fmod=1),
             helper.make_node("Conv", ["q", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("ReduceMean", ["r2"] + ([] if opset < 18 else ["axes"]), ["y"],
                              keepdims=1, **mean_axes)]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    graph = helper.make_graph(
        nodes, "sandwich", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _converted(model: onnx.ModelProto, tmp_path) -> str:
    return mrvl_convert.convert(model, str(tmp_path / "art")).out_dir


def _feeds(session: HybridSession, seed: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in session.input_specs:
        if spec.dtype == "int64":
            feeds[spec.name] = rng.integers(0, 2, spec.shape).astype(np.int64)
        else:
            feeds[spec.name] = (rng.standard_normal(spec.shape) * scale).astype(np.float32)
    return feeds


def _same_as_stages(session: HybridSession, feeds) -> None:
    fused = session.run(None, feeds)
    staged, _ = session.run(None, feeds, capture=True)  # capture runs stage by stage
    assert session.fused, session.fused_reason
    for a, b in zip(fused, staged):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def _mod_only() -> onnx.ModelProto:
    m = numpy_helper.from_array(np.full((1, 4), 0.7, np.float32), "m")
    graph = helper.make_graph(
        [helper.make_node("Mod", ["x", "m"], ["y"], fmod=1)], "cpu_only",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [m])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("build, stages", [
    (conv_then_cpu_tail, 2), (_sandwich, 3), (lambda: _sandwich(18), 3),
    (lambda: corpus_transformer.vit_tiny(blocks=1), 1)],
    ids=["mrvl-cpu", "mrvl-cpu-mrvl", "mrvl-cpu-mrvl-opset18", "one-mrvl-stage"])
def test_fused_run_is_bit_identical_to_the_stages(build, stages, tmp_path):
    session = HybridSession(_converted(build(), tmp_path), threads=1)
    assert len(session.stages) == stages
    for seed in range(3):
        _same_as_stages(session, _feeds(session, seed))
    # small segments: the fused session plans its values in one block, as each segment does
    assert session._fused.session.get_session_options().enable_mem_pattern


def test_bert_with_its_int64_embedding_stage_runs_fused(tmp_path):
    model = corpus_transformer.bert_tiny()
    session = HybridSession(_converted(model, tmp_path), threads=1)
    kinds = [s.kind for s in session.stages]
    assert kinds[0] == "cpu" and "mrvl" in kinds
    feeds = corpus_transformer.bert_feeds(0)
    _same_as_stages(session, feeds)


def test_an_overflow_is_reported_as_the_stages_report_it(tmp_path):
    out = _converted(_sandwich(), tmp_path)
    fused = HybridSession(out, on_range_error="warn", threads=1)
    staged = HybridSession(out, on_range_error="warn", threads=1, engine="layers")
    fused.run(None, _feeds(fused, 0))
    assert fused.fused
    big = _feeds(fused, 0, scale=1e6)  # past float16's 65504 at the first layer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Fp16RangeWarning)
        got = fused.run(None, big)
        want = staged.run(None, big)
    assert fused.last_range_events and \
        [e.layer for e in fused.last_range_events] == [e.layer for e in staged.last_range_events]
    np.testing.assert_array_equal(got[0], want[0])
    raising = HybridSession(out, threads=1)
    raising.run(None, _feeds(raising, 0))
    with pytest.raises(Fp16RangeError):
        raising.run(None, big)


def test_a_range_error_does_not_stop_later_calls_running_fused(tmp_path):
    out = _converted(conv_then_cpu_tail(), tmp_path)
    session = HybridSession(out, threads=1)
    with pytest.raises(Fp16RangeError):
        session.run(None, _feeds(session, 0, scale=1e6))
    _same_as_stages(session, _feeds(session, 1))
    assert session.last_range_events == []


@pytest.mark.parametrize("engine, model, reason", [
    ("layers", conv_then_cpu_tail, "layer by layer"),
    ("graph", _mod_only, "one CPU stage"),
])
def test_where_it_does_not_fuse_it_says_why(engine, model, reason, tmp_path):
    session = HybridSession(_converted(model(), tmp_path), threads=1, engine=engine)
    session.run(None, _feeds(session, 0))
    assert not session.fused and reason in session.fused_reason


def test_boundary_tensors_and_captures_still_come_from_the_stages(tmp_path):
    session = HybridSession(_converted(_sandwich(), tmp_path), threads=1)
    feeds = _feeds(session, 0)
    inner = [t.name for t in session.boundary_tensors if t.name != "y"]
    got = session.run(inner + ["y"], feeds)
    want, env = session.run(None, feeds, capture=True)
    for name, value in zip(inner + ["y"], got):
        np.testing.assert_array_equal(value, env[name])


def test_calls_from_several_threads_agree(tmp_path):
    session = HybridSession(_converted(_sandwich(), tmp_path), threads=1)
    feeds = [_feeds(session, seed) for seed in range(4)]
    want = [session.run(None, f, capture=True)[0][0] for f in feeds]
    got = [None] * 4

    def work(k: int) -> None:
        for _ in range(5):
            got[k] = session.run(None, feeds[k])[0]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert session.fused
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_model_with_more_weights_than_the_limit_runs_stage_by_stage(tmp_path, monkeypatch):
    """A second copy of the weights in one session is made only for small models."""
    from mrvl_convert.runtime import fused
    monkeypatch.setattr(fused, "WEIGHT_LIMIT", 1000)
    session = HybridSession(_converted(_sandwich(), tmp_path), threads=1)
    feeds = _feeds(session, 0)
    got = session.run(None, feeds)
    assert not session.fused and "bytes of weights" in session.fused_reason
    np.testing.assert_array_equal(got[0], session.run(None, feeds, capture=True)[0][0])


def test_a_cpu_stage_naming_external_data_is_not_fused_and_its_file_not_read(tmp_path):
    """A CPU stage whose weight lives in external data runs stage by stage; the fused graph
    never opens the file its location names (here one outside the artifact)."""
    import json
    import os
    out = _converted(conv_then_cpu_tail(), tmp_path)
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    [cpu] = [s for s in manifest["stages"] if s["kind"] == "cpu"]
    path = os.path.join(out, cpu["onnx"])
    from onnx.external_data_helper import convert_model_to_external_data
    from mrvl_convert.core.file_hashes import FIELD, file_sha256
    model = onnx.load(path)
    convert_model_to_external_data(model, all_tensors_to_one_file=True,
                                   location="weights.bin", size_threshold=0)
    onnx.save(model, path)
    cpu[FIELD][cpu["onnx"]] = file_sha256(path)  # the manifest's word for the changed file
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    session = HybridSession(out, threads=1)
    feeds = _feeds(session, 0)
    opened = []
    real_open = open

    def watch(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    import builtins
    builtins.open = watch
    try:
        got = session.run(None, feeds)
    finally:
        builtins.open = real_open
    assert not session.fused and "external data" in session.fused_reason
    assert not [f for f in opened if f.endswith("weights.bin")]
    np.testing.assert_array_equal(got[0], session.run(None, feeds, capture=True)[0][0])
