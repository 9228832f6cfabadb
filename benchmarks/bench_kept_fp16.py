"""Verify's int8 reference against the number of fp16 layers in an int8 model. Not a test.

    python benchmarks/bench_kept_fp16.py [--steps 50 100] [--samples 1]

An unrolled recurrent cell is thousands of small fp16 layers between an int8 model's int8
layers, and ``verify/kept_fp16.py`` rounds each of them in the QDQ reference as the artifact
rounds it. Per size: ``tests/support/recurrent.py``'s CRNN (Conv front end, bidirectional LSTM
of ``--steps`` steps, FC head) converted with ``--quantize int8`` (the recipe, minmax on 8
seeded inputs), then the fp16 layers rounded (``rounded_as_artifact`` alone, on the QDQ model
with its cell unrolled as ``compare`` unrolls it) and the whole of ``compare(qdq, artifact)``
(onnxruntime session set-up, the fp16 floor and the runs included), each timed once, and the
verdict. Last line: each time's ratio between the largest and the smallest size over the
ratio of their layer counts (1: linear; 2 for twice the layers: quadratic).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from support import recurrent  # noqa: E402  (tests/support/recurrent.py)

import mrvl_convert  # noqa: E402
from mrvl_convert.frontend.recurrent_reference import unrolled_cells  # noqa: E402
from mrvl_convert.quantize.recipe import Quantization  # noqa: E402
from mrvl_convert.runtime import HybridSession  # noqa: E402
from mrvl_convert.verify.kept_fp16 import rounded_as_artifact  # noqa: E402


@dataclass(frozen=True)
class Row:
    steps: int
    nodes: int  # the QDQ model's nodes the artifact runs as fp16 layers
    round_s: float
    verify_s: float
    verdict: str


def measure(steps: int, samples: int, tmp: Path) -> Row:
    """One size: its fp16 nodes, the rounding's and verify's seconds, the verdict."""
    model = recurrent.crnn(steps=steps)
    calibration = np.random.default_rng(0).standard_normal((8, 1, 3, 8, steps))
    art = tmp / f"crnn_{steps}"
    result = mrvl_convert.convert(model, art, quantize=Quantization(
        calibration={"image": calibration.astype(np.float32)}))
    qdq = art / result.manifest["quantization"]["file"]
    session = HybridSession(art)
    proto = unrolled_cells(onnx.load(qdq), {t.name: t.shape for t in session.input_specs})
    start = time.perf_counter()
    rounded = rounded_as_artifact(proto, session)
    rounding = time.perf_counter() - start
    start = time.perf_counter()
    comparison = mrvl_convert.compare(qdq, art, samples=samples)
    return Row(steps, len(rounded), rounding, time.perf_counter() - start,
               "PASS" if comparison.passed else comparison.summary_line())


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 100])
    parser.add_argument("--samples", type=int, default=1)
    args = parser.parse_args(argv)
    rows: List[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench_kept_fp16_") as tmp:
        print("| steps | fp16 nodes rounded | rounding (s) | verify (s) | verdict |")
        print("|---|---|---|---|---|")
        for steps in args.steps:
            row = measure(steps, args.samples, Path(tmp))
            rows.append(row)
            print(f"| {row.steps} | {row.nodes} | {row.round_s:.2f} | {row.verify_s:.1f} | "
                  f"{row.verdict} |", flush=True)
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        size = last.nodes / first.nodes
        print(f"{size:.2f}x the nodes: rounding {last.round_s / first.round_s / size:.2f}, "
              f"verify {last.verify_s / first.verify_s / size:.2f} times linear")
    return 0


if __name__ == "__main__":
    sys.exit(main())
