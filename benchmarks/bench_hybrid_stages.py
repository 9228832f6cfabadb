"""The hybrid's cost on a model cut into many stages, against onnxruntime. Not a test.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_hybrid_stages.py [--blocks 31] [--runs 20]

The model: ``blocks`` times (3x3 Conv 16->16 + Relu on Mrvl, then Sigmoid on CPU) at 16x16,
so 2 x blocks stages alternate. Prints the median latency of ``HybridSession`` and of
onnxruntime on the original model, each at 1 and 2 intra-op threads. ``HybridSession`` is
given ``threads=`` only where it takes it, so the same script measures an older checkout
(``PYTHONPATH=<old worktree>``) whose CPU stages still spin.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from support.models import Builder  # noqa: E402  (tests/support/models.py)

import mrvl_convert  # noqa: E402
from mrvl_convert.runtime import HybridSession  # noqa: E402
from bench_partition import median_ms, ort_session  # noqa: E402


def many_stages(blocks: int):
    b = Builder(0)
    y = b.input("x", [1, 16, 16, 16])
    for k in range(blocks):
        y = b.op("Relu", [b.conv(y, 16, 16, pads=[1, 1, 1, 1])])
        y = b.op("Sigmoid", [y])
    return b.model([y], name="many_stages")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=31)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    model = many_stages(args.blocks)
    feed = {"x": np.random.default_rng(0).standard_normal([1, 16, 16, 16]).astype(np.float32)}
    takes_threads = "threads" in inspect.signature(HybridSession).parameters
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(model, os.path.join(tmp, "art"))
        print(f"{len(result.manifest['stages'])} stages; HybridSession threads= "
              f"{'yes' if takes_threads else 'no (older checkout)'}")
        for t in (1, 2):
            kwargs = {"threads": t} if takes_threads else {}
            hybrid = HybridSession(result.out_dir, **kwargs)
            ort = ort_session(model, t)
            h = median_ms(lambda: hybrid.run(None, feed), args.runs)
            o = median_ms(lambda: ort.run(None, feed), args.runs)
            print(f"{t} thread(s): hybrid {h:.2f} ms, onnxruntime {o:.2f} ms, {h / o:.1f}x")


if __name__ == "__main__":
    main()
