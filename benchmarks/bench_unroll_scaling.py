"""How conversion time grows with the sequence length of an unrolled recurrent cell.

    python benchmarks/bench_unroll_scaling.py [--steps 64] [--repeat 3] [--hidden 16] [--profile]

A synthetic CRNN (Conv -> Relu -> MaxPool -> bidirectional LSTM -> FC head: the test suite's
``tests/support/recurrent.py::crnn``) at T and 2T steps. ``frontend/recurrent_unroll.py``
writes each step as its own nodes, so the canonical graph grows linearly in T; conversion
should too. Printed per model: the accelerator layers written (every ``*-nodes.json``), the median time of
``mrvl_convert.convert`` and of the baseline (``bench_convert.baseline``: ``onnx.load`` plus
writing the weights as JSON), their ratio, and time(2T) / time(T) (2.0 is linear, 4.0
quadratic). ``--profile`` prints the functions of the 2T conversion with the largest own time
(cProfile), to find what grows.

Not a test: timings on a shared machine vary; the ratio of the two lengths is what to read.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Dict

import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_convert import baseline, median_time  # noqa: E402
from support.recurrent import crnn  # noqa: E402  (tests/support/recurrent.py)

import mrvl_convert  # noqa: E402


def measure(steps: int, hidden: int, work: Path, repeat: int) -> Dict[str, float]:
    """Convert the CRNN of ``steps`` steps: its times and size."""
    path = work / f"crnn_{steps}.onnx"
    onnx.save(crnn(steps=steps, hidden=hidden), str(path))
    out = work / f"out_{steps}"
    t_conv = median_time(lambda: mrvl_convert.convert(path, out), repeat)
    t_base = median_time(lambda: baseline(path, work / "baseline.json"), repeat)
    layers = sum(len(json.loads(f.read_text())["nodes"]) for f in out.glob("*-nodes.json"))
    return {"steps": steps, "layers": layers, "convert_s": t_conv,
            "baseline_s": t_base, "ratio": t_conv / t_base}


def profile(steps: int, hidden: int, work: Path, top: int = 25) -> None:
    path = work / f"crnn_{steps}.onnx"
    onnx.save(crnn(steps=steps, hidden=hidden), str(path))
    prof = cProfile.Profile()
    prof.runcall(mrvl_convert.convert, path, work / "out_profile")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=64, help="T (the second model has 2T)")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [measure(t, args.hidden, work, args.repeat)
                for t in (args.steps, 2 * args.steps)]
        if args.profile:
            profile(2 * args.steps, args.hidden, work)
    print(f"command: python benchmarks/bench_unroll_scaling.py {' '.join(sys.argv[1:])}")
    print(f"{'steps':>6}{'layers':>7}{'convert(s)':>12}{'load+write(s)':>15}{'ratio':>8}")
    for r in rows:
        print(f"{r['steps']:>6}{r['layers']:>7}{r['convert_s']:>12.3f}{r['baseline_s']:>15.4f}"
              f"{r['ratio']:>8.0f}")
    print(f"time(2T)/time(T) = {rows[1]['convert_s'] / rows[0]['convert_s']:.2f} "
          "(2.0: linear in T)")


if __name__ == "__main__":
    main()
