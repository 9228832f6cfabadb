"""Drawing and estimating against conversion time, and the page's layout time in a real browser.

    python benchmarks/bench_draw_estimate.py [--repeat 3] [--screenshot docs/partition_densenet121.png]

On the biggest corpus model (DenseNet-121 light, from the onnx wheel) it reports the median wall
time of: `convert` alone; building the page (`viz.describe` + `render_page`) and the
`.placement.onnx` (`viz.annotate`); the estimate (`estimate_artifact`, which reads the artifact's
JSON files). Then, when Debian's `chromium` is on PATH, the time ELK takes to lay the page out in
headless Chromium (read from the page itself), for DenseNet-121 expanded and for a generated
3,000-node model, and screenshots of DenseNet-121's page (expanded with a node's details pinned,
and with every stage collapsed).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.estimate import estimate_artifact
from mrvl_convert.frontend.load import load_model
from mrvl_convert.viz import annotate, describe, render_page

sys.path.insert(0, str(Path(__file__).parent))
from bench_convert import median_time  # noqa: E402

DENSENET = Path(onnx.__file__).parent / "backend/test/data/light/light_densenet121.onnx"
FOCUS = "#node="   # the page opens with this node's details pinned


def big_model(blocks: int = 600) -> onnx.ModelProto:
    """Conv -> Relu -> Add(residual) -> Sigmoid -> Mul blocks: 5 nodes each, 3,000 for 600."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(blocks):
        w = f"w{i}"
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32), w))
        nodes += [helper.make_node("Conv", [x, w], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Add", [f"r{i}", x], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Sigmoid", [f"a{i}"], [f"s{i}"], name=f"sig{i}"),
                  helper.make_node("Mul", [f"a{i}", f"s{i}"], [f"m{i}"], name=f"mul{i}")]
        x = f"m{i}"
    graph = helper.make_graph(nodes, "big3000",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, 8, 8])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def chromium(args, url: str, tmp: Path) -> str:
    profile = tempfile.mkdtemp(dir=tmp)
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=600000",
           *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900).stdout


def layout_ms(page: Path, tmp: Path, hash_: str = "") -> tuple:
    dom = chromium(["--dump-dom"], page.as_uri() + hash_, tmp)
    ms, drawn = re.search(r'data-layout-ms="(\d+)"', dom), re.search(r'data-drawn="(\d+)"', dom)
    return (int(ms.group(1)), int(drawn.group(1))) if ms and drawn else (None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--screenshot", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        out = tmp / "dn"
        t_convert = median_time(lambda: mrvl_convert.convert(DENSENET, out), args.repeat)
        result = mrvl_convert.convert(DENSENET, out)
        loaded = load_model(DENSENET)
        t_page = median_time(lambda: render_page(describe(loaded.proto, result.report)),
                             args.repeat)
        t_annot = median_time(lambda: annotate(loaded.proto, result.report), args.repeat)
        t_est = median_time(lambda: estimate_artifact(out), args.repeat)
        nodes = len(loaded.proto.graph.node)
        print(f"command: python benchmarks/bench_draw_estimate.py --repeat {args.repeat}")
        print(f"DenseNet-121 light ({nodes} nodes, {result.summary['mrvl_subgraphs']} Mrvl + "
              f"{result.summary['cpu_subgraphs']} CPU stages), median of {args.repeat}:")
        print(f"  convert                       {t_convert:7.3f} s")
        print(f"  page (describe + render)      {t_page:7.3f} s  ({t_page / t_convert:.1%} of convert)")
        print(f"  placement.onnx (annotate)     {t_annot:7.3f} s  ({t_annot / t_convert:.1%})")
        print(f"  estimate (from the artifact)  {t_est:7.3f} s  ({t_est / t_convert:.1%})")
        if shutil.which("chromium") is None:
            print("chromium not on PATH: browser layout times and screenshot skipped")
            return
        mrvl_convert.convert(DENSENET, out, draw=True, estimate=True)
        page = out / "light_densenet121.html"
        for label, hash_ in (("expanded", "#expand"), ("collapsed", "#collapse")):
            ms, drawn = layout_ms(page, tmp, hash_)
            print(f"  browser layout, {label:<9}      {ms} ms for {drawn} boxes (headless Chromium)")
        big = tmp / "big3000.onnx"
        onnx.save(big_model(), str(big))
        t_big = time.perf_counter()
        mrvl_convert.convert(big, tmp / "big", draw=True)
        t_big = time.perf_counter() - t_big
        ms, drawn = layout_ms(tmp / "big" / "big3000.html", tmp, "#expand")
        print(f"3,000-node model: convert + draw {t_big:.2f} s; browser layout {ms} ms for "
              f"{drawn} boxes (expanded)")
        if args.screenshot:
            # A CPU node if the partition cuts, else the first Conv: a node with details to show.
            nodes = result.report["nodes"]
            focus = next((n["name"] for n in nodes if n["placement"] == "cpu"),
                         next(n["name"] for n in nodes if n["op_type"] == "Conv"))
            chromium([f"--screenshot={args.screenshot.resolve()}", "--window-size=1600,1000"],
                     page.as_uri() + FOCUS + focus, tmp)
            print(f"screenshot of DenseNet-121's page: {args.screenshot} (node {focus} pinned)")
            collapsed = args.screenshot.with_name(args.screenshot.stem + "_collapsed.png")
            chromium([f"--screenshot={collapsed.resolve()}", "--window-size=1600,1000"],
                     page.as_uri() + "#collapse", tmp)
            print(f"screenshot with every stage collapsed: {collapsed}")


if __name__ == "__main__":
    sys.exit(main())
