"""How a graph-engine segment holds memory.

A segment with many weights hands them to onnxruntime through a file and keeps none itself
(``graph_engine._session``, ``kernels/weight_store.py``): the same outputs as when onnxruntime
reads our arrays in place, the numpy path reads the weights back from that file, and the
temporary directory is left empty. Only a segment with few values has onnxruntime plan them in
one block (the memory pattern)."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from mrvl_convert import convert
from mrvl_convert.runtime import HybridSession
from mrvl_convert.runtime.graph_engine import PATTERN_BYTES, SPILL_BYTES
from support import models


def _wide_cnn():
    """A 3x3 conv of 256 -> 512 channels: more weight bytes than a segment keeps in memory."""
    b = models.Builder(seed=5)
    x = b.input("x", [1, 256, 6, 6])
    y = b.op("Relu", [b.conv(x, 256, 512, pads=[1, 1, 1, 1])])
    y = b.op("Relu", [b.conv(y, 512, 32, k=1)])
    return b.model([b.conv(y, 32, 8, k=3, group=2)])


def _token_fcs():
    """Two FCs on a [1, 8, 1024] token tensor (MatMul by the transposed weight in onnxruntime,
    its transpose in numpy): 4 MiB and more of weights."""
    b = models.Builder(seed=6)
    x = b.input("x", [1, 8, 1024])
    return b.model([b.matmul_add(b.op("Relu", [b.matmul_add(x, 1024, 1024)]), 1024, 16)])


MODELS = {"wide_cnn": (_wide_cnn, (1, 256, 6, 6)), "token_fcs": (_token_fcs, (1, 8, 1024))}


@pytest.fixture(scope="module", params=sorted(MODELS))
def artifact(tmp_path_factory, request):
    directory = str(tmp_path_factory.mktemp("spill") / request.param)
    convert(MODELS[request.param][0](), directory)
    return directory


def _feed(artifact: str):
    shape = MODELS[os.path.basename(artifact)][1]
    return {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}


def _opened(artifact: str, temp: str, monkeypatch) -> "tuple[HybridSession, object]":
    monkeypatch.setattr(tempfile, "tempdir", temp)
    session = HybridSession(artifact)
    [segment] = session.stages[0].runner.graph.parts
    return session, segment


def test_a_big_segment_reads_its_weights_from_a_file_and_keeps_none(artifact, tmp_path,
                                                                    monkeypatch):
    spilled, segment = _opened(artifact, str(tmp_path), monkeypatch)
    assert segment.weights.nbytes >= SPILL_BYTES
    assert segment.weights.spilled and segment.weights.arrays() == {} and segment.keep is None
    assert os.listdir(tmp_path) == []  # the files are gone; the weights file stays open
    in_memory, other = _opened(artifact, str(tmp_path / "missing"), monkeypatch)
    assert not other.weights.spilled and other.keep  # no temporary directory: in place
    feed = _feed(artifact)
    for got, want in zip(spilled.run(None, feed), in_memory.run(None, feed)):
        np.testing.assert_array_equal(got, want)


def test_the_numpy_path_reads_the_spilled_weights_back(artifact, tmp_path, monkeypatch):
    """Against the per-layer engine, whose kernels keep the raw constants (no segment)."""
    spilled, _ = _opened(artifact, str(tmp_path), monkeypatch)
    feed = _feed(artifact)
    (_, got), (_, want) = spilled.run_layers(feed), \
        HybridSession(artifact, engine="layers").run_layers(feed)
    assert [t.spec.name for t in got] == [t.spec.name for t in want] and len(got) >= 2
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.value, b.value, err_msg=a.spec.name)


def test_a_fused_session_reads_a_spilled_segments_weights_back(tmp_path, monkeypatch):
    """Two Mrvl stages around a CPU Mod, one of them spilled: the one fused session takes the
    weights back from its file and gives what the stages give."""
    b = models.Builder(seed=7)
    x = b.input("x", [1, 256, 6, 6])
    y = b.op("Relu", [b.conv(x, 256, 512, pads=[1, 1, 1, 1])])
    y = b.op("Mod", [y, b.const(np.full((1, 512, 6, 6), 0.75, np.float32))], fmod=1)
    model = b.model([b.op("Relu", [b.conv(y, 512, 8, k=1)])])
    directory = str(tmp_path / "fused")
    convert(model, directory)
    session, first = _opened(directory, str(tmp_path), monkeypatch)
    assert first.weights.spilled and len(session.stages) == 3
    feed = {"x": np.random.default_rng(2).standard_normal((1, 256, 6, 6)).astype(np.float32)}
    fused = session.run(None, feed)
    assert session.fused, session.fused_reason
    staged, _ = session.run(None, feed, capture=True)
    for got, want in zip(fused, staged):
        np.testing.assert_array_equal(got, want)


def test_only_a_segment_with_few_values_plans_them_in_one_block(artifact, tmp_path):
    small = HybridSession(artifact).stages[0].runner.graph.parts[0]
    assert small.pattern and small.session.get_session_options().enable_mem_pattern
    b = models.Builder(seed=8)
    x = b.input("x", [1, 3, 256, 256])
    big_values = b.model([b.op("Relu", [b.conv(x, 3, 32, pads=[1, 1, 1, 1])])])
    directory = str(tmp_path / "big")
    convert(big_values, directory)
    big = HybridSession(directory).stages[0].runner.graph.parts[0]
    assert 3 * 32 * 256 * 256 * 4 > PATTERN_BYTES
    assert not big.pattern and not big.session.get_session_options().enable_mem_pattern
