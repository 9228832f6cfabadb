"""The YOLOv8n-shaped detector of the corpus (tests/support/corpus_detect.py) on the newer layer
set.

Its Resize, Split, 4-D Concats and DFL Transposes run on the accelerator, and so do the SiLU
pieces (Sigmoid, Mul) and the Softmax (issue 17a); the head's three 3-D Concats too, as channel
Concats of 4-D views (frontend/concat_views.py; the README's "Real networks" row, "Concat x3" on
the CPU, is from before it): one Mrvl subgraph, nothing on the CPU; the hybrid agrees with
onnxruntime within fp16 tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE
from support import corpus
from support.models import run_ort

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def detector():
    return corpus.built("yolo_detect")


@pytest.fixture(scope="module")
def converted(detector, tmp_path_factory):
    return mrvl_convert.convert(detector, tmp_path_factory.mktemp("yolo") / "art")


def _placements(result, op_type):
    return {e["name"]: e["placement"] for e in result.report["nodes"] if e["op_type"] == op_type}


def test_detector_is_in_the_corpus_with_its_output_shape(detector):
    assert "yolo_detect" in corpus.BUILT
    assert [d.dim_value for d in detector.graph.output[0].type.tensor_type.shape.dim] == [
        1, 4 + 3, 16 * 16 + 8 * 8]


def test_resize_split_concat_and_transpose_run_on_the_accelerator(converted):
    assert set(_placements(converted, "Resize").values()) == {"mrvl"}
    assert set(_placements(converted, "Split").values()) == {"mrvl"}
    assert set(_placements(converted, "Transpose").values()) == {"mrvl"}
    concats = _placements(converted, "Concat")
    assert concats["c2f_concat"] == concats["neck_concat"] == "mrvl"
    # the head's 3-D Concats are channel Concats of their 4-D views (frontend/concat_views.py)
    heads = [e for e in converted.report["nodes"] if e["op_type"] == "Concat"
             and "3-D tensors as the channel Concat" in e.get("canonical", "")]
    assert len(heads) == 3 and {e["placement"] for e in heads} == {"mrvl"}, heads


def test_hybrid_agrees_with_onnxruntime_within_fp16_tolerance(detector, converted):
    feed = corpus.feeds(detector)
    [got] = HybridSession(converted.out_dir, threads=1).run(None, feed)
    [want] = run_ort(detector, feed).values()
    assert got.shape == want.shape
    rel = float(np.abs(got - want).max()) / float(np.abs(want).max())
    assert rel <= DEFAULT_TOLERANCE.max_rel, rel


def test_upstream_set_keeps_resize_and_split_on_cpu(detector, tmp_path):
    result = mrvl_convert.convert(detector, tmp_path / "art", layer_set="upstream-0.19")
    assert set(_placements(result, "Resize").values()) == {"cpu"}
    assert set(_placements(result, "Split").values()) == {"cpu"}


def test_detector_is_one_mrvl_subgraph_with_nothing_on_cpu(converted):
    # the README's row, "yolo_detect | 1 | Concat x3", is from before concat_views.py
    assert converted.summary["mrvl_subgraphs"] == 1
    cpu = [e["op_type"] for e in converted.report["nodes"] if e["placement"] == "cpu"]
    assert cpu == [], cpu


def test_silu_and_softmax_run_on_the_accelerator(converted):
    for op_type in ("Sigmoid", "Mul", "Softmax"):
        placements = _placements(converted, op_type)
        assert placements and set(placements.values()) == {"mrvl"}, (op_type, placements)
