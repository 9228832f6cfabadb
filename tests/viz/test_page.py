"""The --draw page in a real browser (headless Chromium): layout, opening view, search, collapse.

CI (``CI=true``, set by .ci/run, which installs Debian's ``chromium``) fails without the browser;
elsewhere the browser tests skip.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert

BLOCKS = 30           # Conv -> Relu blocks: a column many screens tall at 100%
CPU_NODE = "odd_sin"  # a Sin half-way down, which no rule maps: a CPU stage between two Mrvl ones
WINDOW = "1400,900"
READABLE_PX = 9       # the smallest label the page opens with (11px labels)


def _chain_model():
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(BLOCKS):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}",
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
        if i == BLOCKS // 2:
            nodes.append(helper.make_node("Sin", [x], ["s"], name=CPU_NODE))
            x = "s"
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, 8, 8])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("page") / "chain"
    result = mrvl_convert.convert(_chain_model(), out, name="chain", draw=True)
    return result.out_dir / "chain.html"


def _graph(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', html,
                      re.S)
    return json.loads(match.group(1).replace("<\\/", "</"))


def test_summary_counts_in_words(page):
    html = page.read_text()
    assert "on the accelerator in 2 subgraphs, 1 on CPU in 1 subgraph, 0 removed" in html
    assert "(0 constant-only nodes not drawn)" in html


def test_words_wrap_between_words_not_inside_them(page):
    css = re.search(r"<style>(.*?)</style>", page.read_text(), re.S).group(1)
    assert "break-all" not in css and "anywhere" not in css
    assert "overflow-wrap:break-word" in css   # only a word wider than the panel is cut


def _browser() -> str:
    path = shutil.which("chromium")
    if path is not None:
        return path
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but chromium is not on PATH (.ci/run installs Debian's chromium)")
    pytest.skip("no chromium on this machine (CI installs it)")


def test_without_chromium_ci_fails_and_elsewhere_skips(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        _browser()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        _browser()


def _open(page: Path, address: str, tmp_path: Path) -> Dict[str, str]:
    """The page's <body> data- attributes after Chromium loaded ``page`` + ``address``."""
    run = subprocess.run(
        [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WINDOW}",
         "--virtual-time-budget=20000", "--dump-dom", page.as_uri() + address],
        capture_output=True, text=True, timeout=120)
    body = re.search(r"<body([^>]*)>", run.stdout)
    assert body, f"no page from chromium: {run.stderr[-2000:]}"
    state = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))
    assert state.get("state") == "ready", f"the layout did not finish: {state}"
    state["dom"] = run.stdout
    return state


def test_page_opens_readable_with_every_stage_on_screen_and_search_finds_a_node(page, tmp_path):
    data = _graph(page.read_text())
    state = _open(page, f"?search={CPU_NODE}", tmp_path)
    assert int(state["drawn"]) == len(data["nodes"])
    assert float(state["scale"]) * 11 >= READABLE_PX - 0.01
    assert int(state["stages-in-view"]) == len(data["stages"]) == 3
    assert int(state["found"]) == 1 and state["focused"] == CPU_NODE
    assert state["dom"].count('class="node hit"') == 1


def test_collapse_shows_one_box_per_stage(page, tmp_path):
    data = _graph(page.read_text())
    state = _open(page, "?collapse=1", tmp_path)
    unstaged = sum(1 for n in data["nodes"] if not n["stage"])   # the input and the output
    assert int(state["stage-boxes"]) == len(data["stages"]) == 3
    assert int(state["drawn"]) == len(data["stages"]) + unstaged
    assert state["dom"].count('class="edge cut"') == 2   # into the CPU stage and out of it
