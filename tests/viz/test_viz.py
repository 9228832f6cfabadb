"""The partition page and <model>.placement.onnx."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

import mrvl_convert
from support.models import run_ort, small_cnn

DENSENET = (Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
            / "light_densenet121.onnx")


def _page_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', html,
                      re.S)
    return json.loads(match.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def cut_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("viz") / "cnn"
    return mrvl_convert.convert(small_cnn(sigmoid=True), out, draw=True, estimate=True)


def test_placement_onnx_runs_like_the_original(cut_model):
    path = cut_model.out_dir / f"{cut_model.model_name}.placement.onnx"
    annotated = onnx.load(str(path))
    onnx.checker.check_model(annotated)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = run_ort(small_cnn(sigmoid=True), {"x": x})
    got = run_ort(annotated, {"x": x})
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_placement_onnx_metadata(cut_model):
    annotated = onnx.load(str(cut_model.out_dir / f"{cut_model.model_name}.placement.onnx"))
    entries = cut_model.report["nodes"]
    assert len(annotated.graph.node) == len(entries)
    for node, entry in zip(annotated.graph.node, entries):
        meta = {p.key: p.value for p in node.metadata_props}
        assert meta["mrvl.placement"] == entry["placement"]
        assert meta.get("mrvl.stage") == entry.get("stage")
        assert meta.get("mrvl.layer") == entry.get("layer")
        assert (meta.get("mrvl.rule") or meta.get("mrvl.reason"))
    sig = next(n for n in annotated.graph.node if n.op_type == "Sin")
    assert {p.key: p.value for p in sig.metadata_props}["mrvl.placement"] == "cpu"
    model_meta = {p.key: p.value for p in annotated.metadata_props}
    assert "ESTIMATE" in model_meta["mrvl.estimate_us"]


def test_page_is_self_contained_and_carries_the_placements(cut_model):
    html = (cut_model.out_dir / f"{cut_model.model_name}.html").read_text()
    assert not re.search(r'<(script|link|img)[^>]+(src|href)=', html)
    assert "ELK" in html
    data = _page_data(html)
    by_name = {n["name"]: n for n in data["nodes"]}
    for entry in cut_model.report["nodes"]:
        drawn = by_name[entry.get("name_in_model", entry["name"])]
        assert drawn["placement"] == entry["placement"]
        assert drawn.get("stage") == entry.get("stage")
    assert [s["kind"] for s in data["stages"]] == ["mrvl", "cpu", "mrvl"]
    assert data["stages"][0]["estimated_us"] is not None
    stage_of = {n["id"]: n["stage"] for n in data["nodes"]}
    crossing = [e for e in data["edges"]
                if stage_of[e[0]] and stage_of[e[1]] and stage_of[e[0]] != stage_of[e[1]]]
    assert len(crossing) == 2           # into the Sin's CPU stage and out of it


def test_result_draw(tmp_path):
    result = mrvl_convert.convert(small_cnn(), tmp_path / "plain")
    assert not list((tmp_path / "plain").glob("*.html"))
    page = result.draw(tmp_path / "page.html")
    assert _page_data(page.read_text())["model"] == result.model_name


@pytest.mark.slow   # converting DenseNet-121 takes seconds; benchmarks/bench_draw_estimate.py draws it too
def test_densenet_page_draws_the_data_path(tmp_path):
    result = mrvl_convert.convert(DENSENET, tmp_path / "dn", draw=True)
    data = _page_data((tmp_path / "dn" / "light_densenet121.html").read_text())
    summary = result.summary
    real = [n for n in data["nodes"] if n["placement"] != "io"]
    # every node that is not a folded constant is drawn, and none of those is hidden
    assert len(real) + data["hidden_constant_nodes"] == summary["nodes"]
    assert sum(n["placement"] == "mrvl" for n in real) == summary["mrvl_nodes"]
    assert sum(n["placement"] == "cpu" for n in real) == summary["cpu_nodes"]
    assert len(data["stages"]) == summary["mrvl_subgraphs"] + summary["cpu_subgraphs"]
